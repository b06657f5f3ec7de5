// Package notifytest has local fakes of the endpoints notifications go
// to: a commit status API (GitHub's, GitLab's, Gitea's) and a webhook
// receiver (generic, signed, or Slack-compatible). Each implements its
// endpoint's documented request contract (paths, authorization, body
// fields, status codes, rate-limit answers) and refuses what the real one
// refuses, so a test sees what a real endpoint would take.
package notifytest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Forge is a commit status API.
type Forge struct {
	Type   string // github, gitlab or gitea
	Token  string
	Repo   string // owner/name; GitLab: the project's path
	Server *httptest.Server
	// Changed, when set, is called after each request (to record the
	// fake's state where a script reads it).
	Changed func(*Forge)

	mu       sync.Mutex
	statuses map[string]string // sha + " " + context -> state
	requests []time.Time
	limited  int
	resetAt  time.Time
	refused  []string
}

var sha40 = regexp.MustCompile(`^[0-9a-f]{40}$`)

// NewForge starts a forge of typ that accepts token on repo. Close its
// Server when done.
func NewForge(typ, token, repo string) *Forge {
	f := &Forge{Type: typ, Token: token, Repo: repo, statuses: map[string]string{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// Limit answers the next n requests with the forge's rate limit: GitHub's
// primary one (403, x-ratelimit-remaining 0, x-ratelimit-reset a second
// on), or 429 with Retry-After: 1 (GitLab, Gitea).
func (f *Forge) Limit(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limited = n
}

// Status is the state of context on sha, "" when none was written.
func (f *Forge) Status(sha, context string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statuses[sha+" "+context]
}

// Statuses are the statuses written, by "sha context".
func (f *Forge) Statuses() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.statuses)
}

// Requests are the times requests came.
func (f *Forge) Requests() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.requests...)
}

// Refused says why each refused request was.
func (f *Forge) Refused() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.refused...)
}

// ResetAt is when the last rate limit GitHub's way reset.
func (f *Forge) ResetAt() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resetAt
}

func (f *Forge) refuse(w http.ResponseWriter, code int, why string) {
	f.refused = append(f.refused, why)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"message": why})
}

func (f *Forge) serve(w http.ResponseWriter, r *http.Request) {
	f.handle(w, r)
	if f.Changed != nil {
		f.Changed(f)
	}
}

func (f *Forge) handle(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, time.Now())
	if r.Method != http.MethodPost {
		f.refuse(w, http.StatusMethodNotAllowed, "POST only")
		return
	}
	if f.limited > 0 {
		f.limited--
		switch f.Type {
		case "github":
			f.resetAt = time.Unix(time.Now().Add(time.Second).Unix(), 0)
			w.Header().Set("X-Ratelimit-Limit", "5000")
			w.Header().Set("X-Ratelimit-Remaining", "0")
			w.Header().Set("X-Ratelimit-Reset", strconv.FormatInt(f.resetAt.Unix(), 10))
			f.refuse(w, http.StatusForbidden, "API rate limit exceeded")
		default:
			w.Header().Set("Retry-After", "1")
			f.refuse(w, http.StatusTooManyRequests, "Retry later")
		}
		return
	}
	var want *regexp.Regexp
	switch f.Type {
	case "github":
		want = regexp.MustCompile(`^/repos/([^/]+/[^/]+)/statuses/([^/]+)$`)
		if r.Header.Get("Authorization") != "Bearer "+f.Token {
			f.refuse(w, http.StatusUnauthorized, "Bad credentials")
			return
		}
		if r.Header.Get("Accept") != "application/vnd.github+json" {
			f.refuse(w, http.StatusUnsupportedMediaType, "Accept must be application/vnd.github+json")
			return
		}
	case "gitea":
		want = regexp.MustCompile(`^/repos/([^/]+/[^/]+)/statuses/([^/]+)$`)
		if r.Header.Get("Authorization") != "token "+f.Token {
			f.refuse(w, http.StatusUnauthorized, "token is required")
			return
		}
	case "gitlab":
		// :id is the numeric ID or the URL-encoded path: one segment.
		want = regexp.MustCompile(`^/projects/([^/]+)/statuses/([^/]+)$`)
		if r.Header.Get("PRIVATE-TOKEN") != f.Token {
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
	if f.Type == "gitlab" {
		repo = strings.ReplaceAll(repo, "%2F", "/")
	}
	if repo != f.Repo {
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
	states := map[string][]string{
		"github": {"error", "failure", "pending", "success"},
		"gitlab": {"pending", "running", "success", "failed", "canceled", "skipped"},
		"gitea":  {"pending", "success", "error", "failure", "warning"},
	}[f.Type]
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
	if f.Type == "gitlab" {
		label = body["name"]
	}
	if label == "" {
		label = "default"
	}
	if f.Type == "github" && len([]rune(body["description"])) > 140 {
		f.refuse(w, http.StatusUnprocessableEntity, "description is too long (maximum is 140 characters)")
		return
	}
	f.statuses[sha+" "+label] = state
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"id": len(f.statuses), "state": state, "context": label})
}

// Hook is a webhook receiver. With a key it is a generic one that checks
// the X-Cortex-Sync-Signature of each body, as docs/notifications.md tells
// receivers to; without, a Slack-compatible one that takes {"text": …}.
type Hook struct {
	Server *httptest.Server
	// Answer, when set, may answer a request instead (n counts from 1):
	// a 429, a 500, or never.
	Answer func(w http.ResponseWriter, n int) bool
	// Changed, when set, is called after each request.
	Changed func(*Hook)

	key      []byte
	mu       sync.Mutex
	received []Received
	bodies   []json.RawMessage
	texts    []string
	times    []time.Time
	refused  int
	requests int
}

// NewHook starts a receiver; key "" makes it Slack-compatible. Close its
// Server when done.
func NewHook(key string) *Hook {
	h := &Hook{}
	if key != "" {
		h.key = []byte(key)
	}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	return h
}

// Sign is the signature of body under key, as a receiver computes it.
func Sign(key, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func (h *Hook) serve(w http.ResponseWriter, r *http.Request) {
	h.handle(w, r)
	if h.Changed != nil {
		h.Changed(h)
	}
}

func (h *Hook) handle(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests++
	h.times = append(h.times, time.Now())
	n, answer := h.requests, h.Answer
	h.mu.Unlock()
	// Outside the lock: an answer may never come (an endpoint that hangs).
	if answer != nil && answer(w, n) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	h.received = append(h.received, Received{Signature: r.Header.Get("X-Cortex-Sync-Signature"), Body: body})
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		h.refused++
		http.Error(w, "invalid_payload", http.StatusBadRequest)
		return
	}
	if h.key != nil {
		// Constant-time, over the raw body, before parsing it.
		if !hmac.Equal([]byte(r.Header.Get("X-Cortex-Sync-Signature")), []byte(Sign(h.key, body))) {
			h.refused++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if !json.Valid(body) {
			h.refused++
			http.Error(w, "bad JSON", http.StatusBadRequest)
			return
		}
		h.bodies = append(h.bodies, json.RawMessage(body))
	} else {
		var m map[string]any
		text, ok := "", false
		if json.Unmarshal(body, &m) == nil {
			text, ok = m["text"].(string)
		}
		if !ok {
			h.refused++
			http.Error(w, "invalid_payload", http.StatusBadRequest)
			return
		}
		h.texts = append(h.texts, text)
	}
	w.Write([]byte("ok"))
}

// Received is a request's body, as sent, and its signature header.
type Received struct {
	Signature string
	Body      []byte
}

// Received are the requests read (not those Answer answered), accepted
// or refused, in order: a test may check their signatures itself.
func (h *Hook) Received() []Received {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Received(nil), h.received...)
}

// Bodies are the signed bodies accepted, as sent.
func (h *Hook) Bodies() []json.RawMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]json.RawMessage(nil), h.bodies...)
}

// Texts are the texts a Slack-compatible receiver accepted.
func (h *Hook) Texts() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.texts...)
}

// Refused counts the requests refused (a bad signature, not JSON).
func (h *Hook) Refused() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refused
}

// Requests are the times requests came, answered or not.
func (h *Hook) Requests() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.times...)
}
