package notify

import (
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fakes below implement each endpoint's documented request contract
// (paths, authorization, body fields, status codes, rate-limit answers),
// and refuse what the real one refuses.

// forgeFake is a commit status API: GitHub's, GitLab's or Gitea's.
type forgeFake struct {
	typ   Type
	token string
	repo  string // owner/name; GitLab: the project's path
	srv   *httptest.Server

	mu       sync.Mutex
	statuses map[string]string // sha + " " + context -> state
	requests []time.Time
	// limited answers the next requests with the forge's rate limit.
	limited int
	resetAt time.Time // GitHub: when the rate limit resets
	refused []string  // why requests were refused
}

var sha40 = regexp.MustCompile(`^[0-9a-f]{40}$`)

func newForgeFake(t *testing.T, typ Type, token, repo string) *forgeFake {
	f := &forgeFake{typ: typ, token: token, repo: repo, statuses: map[string]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *forgeFake) refuse(w http.ResponseWriter, code int, why string) {
	f.refused = append(f.refused, why)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"message": why})
}

func (f *forgeFake) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, time.Now())
	if r.Method != http.MethodPost {
		f.refuse(w, http.StatusMethodNotAllowed, "POST only")
		return
	}
	if f.limited > 0 {
		f.limited--
		switch f.typ {
		case GitHub: // primary rate limit: 403, nothing left, reset in epoch seconds
			w.Header().Set("X-Ratelimit-Limit", "5000")
			w.Header().Set("X-Ratelimit-Remaining", "0")
			f.resetAt = time.Unix(time.Now().Add(time.Second).Unix(), 0)
			w.Header().Set("X-Ratelimit-Reset", strconv.FormatInt(f.resetAt.Unix(), 10))
			f.refuse(w, http.StatusForbidden, "API rate limit exceeded")
		default: // GitLab and Gitea: 429 with Retry-After
			w.Header().Set("Retry-After", "1")
			f.refuse(w, http.StatusTooManyRequests, "Retry later")
		}
		return
	}
	var want *regexp.Regexp
	var auth string
	switch f.typ {
	case GitHub:
		want = regexp.MustCompile(`^/repos/([^/]+/[^/]+)/statuses/([^/]+)$`)
		auth = r.Header.Get("Authorization")
		if auth != "Bearer "+f.token {
			f.refuse(w, http.StatusUnauthorized, "Bad credentials")
			return
		}
		if r.Header.Get("Accept") != "application/vnd.github+json" {
			f.refuse(w, http.StatusUnsupportedMediaType, "Accept must be application/vnd.github+json")
			return
		}
	case Gitea:
		want = regexp.MustCompile(`^/repos/([^/]+/[^/]+)/statuses/([^/]+)$`)
		if r.Header.Get("Authorization") != "token "+f.token {
			f.refuse(w, http.StatusUnauthorized, "token is required")
			return
		}
	case GitLab:
		// :id is the numeric ID or the URL-encoded path: one segment.
		want = regexp.MustCompile(`^/projects/([^/]+)/statuses/([^/]+)$`)
		if r.Header.Get("PRIVATE-TOKEN") != f.token {
			f.refuse(w, http.StatusUnauthorized, "401 Unauthorized")
			return
		}
	}
	m := want.FindStringSubmatch(r.URL.EscapedPath())
	if m == nil {
		f.refuse(w, http.StatusNotFound, "Not Found: "+r.URL.EscapedPath())
		return
	}
	repo := m[1]
	if f.typ == GitLab {
		repo = strings.ReplaceAll(repo, "%2F", "/")
	}
	if repo != f.repo {
		f.refuse(w, http.StatusNotFound, "no repository "+repo)
		return
	}
	sha := m[2]
	if !sha40.MatchString(sha) {
		f.refuse(w, http.StatusUnprocessableEntity, "No commit found for SHA: "+sha)
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		f.refuse(w, http.StatusUnsupportedMediaType, "JSON only")
		return
	}
	var body map[string]string
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		f.refuse(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	states := map[Type][]string{
		GitHub: {"error", "failure", "pending", "success"},
		GitLab: {"pending", "running", "success", "failed", "canceled", "skipped"},
		Gitea:  {"pending", "success", "error", "failure", "warning"},
	}[f.typ]
	state := body["state"]
	ok := false
	for _, s := range states {
		ok = ok || s == state
	}
	if !ok {
		f.refuse(w, http.StatusUnprocessableEntity, "state is invalid: "+state)
		return
	}
	label := body["context"]
	if f.typ == GitLab {
		label = body["name"]
	}
	if label == "" {
		label = "default"
	}
	if f.typ == GitHub && len([]rune(body["description"])) > 140 {
		f.refuse(w, http.StatusUnprocessableEntity, "description is too long (maximum is 140 characters)")
		return
	}
	f.statuses[sha+" "+label] = state
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"id": len(f.statuses), "state": state, "context": label})
}

func (f *forgeFake) status(sha, context string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statuses[sha+" "+context]
}

// hookFake is a generic webhook receiver: it checks the signature with
// its key, as the docs tell receivers to, and keeps what it accepted.
type hookFake struct {
	key []byte
	srv *httptest.Server
	// answer, when set, answers instead (429s, 500s).
	answer func(w http.ResponseWriter, n int) bool

	mu       sync.Mutex
	bodies   []Payload
	texts    []string // a Slack-compatible receiver's text
	times    []time.Time
	refused  int
	requests int
}

func newHookFake(t *testing.T, key string) *hookFake {
	h := &hookFake{}
	if key != "" {
		h.key = []byte(key)
	}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookFake) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests++
	h.times = append(h.times, time.Now())
	if h.answer != nil && h.answer(w, h.requests) {
		return
	}
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		h.refused++
		http.Error(w, "invalid_payload", http.StatusBadRequest)
		return
	}
	if h.key != nil {
		// The receiver's check: constant-time, over the raw body.
		if !hmac.Equal([]byte(r.Header.Get(SignatureHeader)), []byte(Sign(h.key, body))) {
			h.refused++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var p Payload
		if err := json.Unmarshal(body, &p); err != nil {
			h.refused++
			http.Error(w, "bad JSON", http.StatusBadRequest)
			return
		}
		h.bodies = append(h.bodies, p)
	} else {
		// Slack: {"text": …}; anything else is invalid_payload.
		var m map[string]any
		if json.Unmarshal(body, &m) != nil || m["text"] == nil {
			h.refused++
			http.Error(w, "invalid_payload", http.StatusBadRequest)
			return
		}
		h.texts = append(h.texts, m["text"].(string))
	}
	w.Write([]byte("ok"))
}

func (h *hookFake) got() ([]Payload, []string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Payload(nil), h.bodies...), append([]string(nil), h.texts...), h.refused
}
