package agent

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// MaxWebhookBody is the largest webhook body read; a bigger one gets 413.
const MaxWebhookBody = 1 << 20

// DefaultWebhookInterval is the least time between two triggers of one
// Webhook.
const DefaultWebhookInterval = time.Second

// The webhook providers, as Push.Provider names them.
const (
	ProviderGitHub  = "github"
	ProviderGitLab  = "gitlab"
	ProviderGeneric = "generic"
)

// WebhookOptions configure a Webhook.
type WebhookOptions struct {
	// SecretFile holds the shared secret (surrounding white space is
	// trimmed). Required: unsigned pushes are never accepted. It is read
	// again whenever it changes.
	SecretFile string
	// Ref is the followed ref: a full name such as refs/heads/main or
	// refs/tags/v1.2.0, or a prefix ending in /* (refs/tags/* for a semver
	// range). Pushes to other refs are ignored. Empty follows every ref.
	Ref string
	// Trigger is called for each accepted push, from the request's
	// goroutine or, for a coalesced push, a timer's. It must not block:
	// enqueue and return.
	Trigger func(Push)
	// MinInterval is the least time between two triggers (default
	// DefaultWebhookInterval). Valid pushes within it coalesce into one
	// trigger at its end.
	MinInterval time.Duration
	Logger      *slog.Logger
}

// Push is an accepted push.
type Push struct {
	Provider string // ProviderGitHub, ProviderGitLab or ProviderGeneric
	Ref      string // the pushed ref; empty when a generic payload names none
	Revision string // the commit pushed, when the payload says (informative only)
}

// Webhook is the handler of POST /hooks/git for one followed source. It
// authenticates the request by the provider's scheme:
//
//	GitHub   X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>
//	GitLab   X-Gitlab-Token: <the secret>
//	generic  X-Signature: sha256=<hex HMAC-SHA256 of the body>
//
// and answers 401 (nothing triggered) when that fails, 413 past
// MaxWebhookBody, 200 to a GitHub ping, 202 with {"ignored": why} for
// another ref, a deletion or another event, and 202 with {"status":
// "accepted"} or {"status": "coalesced"} for a push it triggers on.
type Webhook struct {
	secret   *secretFile
	ref      string
	trigger  func(Push)
	interval time.Duration
	log      *slog.Logger

	mu      sync.Mutex
	last    time.Time   // of the last trigger
	timer   *time.Timer // pending coalesced trigger
	pending Push
	closed  bool
}

// NewWebhook checks o and reads the secret once, so that a missing or empty
// secret file fails at startup.
func NewWebhook(o WebhookOptions) (*Webhook, error) {
	if o.SecretFile == "" {
		return nil, errors.New("webhook: set webhookSecretFile (--webhook-secret-file); unsigned pushes are never accepted")
	}
	if o.Trigger == nil {
		return nil, errors.New("webhook: no trigger")
	}
	if o.Ref != "" && !strings.HasPrefix(o.Ref, "refs/") {
		return nil, fmt.Errorf("webhook: ref %q: give a full ref such as refs/heads/main or refs/tags/*", o.Ref)
	}
	s, err := newSecretFile(o.SecretFile)
	if err != nil {
		return nil, fmt.Errorf("webhook: webhookSecretFile (--webhook-secret-file): %w", err)
	}
	w := &Webhook{
		secret:   s,
		ref:      o.Ref,
		trigger:  o.Trigger,
		interval: cmpOr(o.MinInterval, DefaultWebhookInterval),
		log:      o.Logger,
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	return w, nil
}

// Close drops a pending coalesced trigger; later pushes are answered but
// trigger nothing.
func (w *Webhook) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
}

// ServeHTTP implements http.Handler.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		writeJSON(rw, http.StatusMethodNotAllowed, map[string]string{"error": "use POST"})
		return
	}
	provider, status, msg := w.serve(rw, r)
	switch {
	case status == http.StatusUnauthorized:
		w.log.Warn("webhook rejected", "provider", provider, "remote", r.RemoteAddr, "reason", msg)
	case status >= 400:
		w.log.Warn("webhook failed", "provider", provider, "remote", r.RemoteAddr, "status", status, "reason", msg)
	}
}

// serve answers the request and returns what to log.
func (w *Webhook) serve(rw http.ResponseWriter, r *http.Request) (provider string, status int, msg string) {
	fail := func(code int, m string) (string, int, string) {
		writeJSON(rw, code, map[string]string{"error": m})
		return provider, code, m
	}
	h := r.Header
	var sig string
	switch {
	case h.Get("X-Hub-Signature-256") != "":
		provider, sig = ProviderGitHub, h.Get("X-Hub-Signature-256")
	case h.Get("X-Gitlab-Token") != "":
		provider = ProviderGitLab
	case h.Get("X-Signature") != "":
		provider, sig = ProviderGeneric, h.Get("X-Signature")
	default:
		return fail(http.StatusUnauthorized, "missing signature: X-Hub-Signature-256, X-Gitlab-Token or X-Signature")
	}
	secret, err := w.secret.get()
	if err != nil {
		// Logged without the secret; the sender learns nothing.
		w.log.Error("webhook secret unreadable", "error", err)
		return fail(http.StatusServiceUnavailable, "webhook secret unavailable")
	}
	if provider == ProviderGitLab && !equalSecret([]byte(h.Get("X-Gitlab-Token")), secret) {
		return fail(http.StatusUnauthorized, "invalid token")
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, MaxWebhookBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return fail(http.StatusRequestEntityTooLarge, "body larger than 1 MiB")
		}
		return fail(http.StatusBadRequest, "reading body failed")
	}
	if provider != ProviderGitLab && !validHMAC(sig, body, secret) {
		return fail(http.StatusUnauthorized, "invalid signature")
	}

	// Authenticated from here on.
	event := ""
	switch provider {
	case ProviderGitHub:
		event = h.Get("X-GitHub-Event")
		switch event {
		case "ping":
			writeJSON(rw, http.StatusOK, map[string]string{"status": "pong"})
			return provider, http.StatusOK, ""
		case "push", "":
		default:
			return w.ignore(rw, provider, "event "+clip(event))
		}
	case ProviderGitLab:
		event = h.Get("X-Gitlab-Event")
		switch event {
		case "Push Hook", "Tag Push Hook", "":
		default:
			return w.ignore(rw, provider, "event "+clip(event))
		}
	}
	p, err := parsePush(provider, h.Get("Content-Type"), body)
	if err != nil {
		return fail(http.StatusBadRequest, err.Error())
	}
	if p.deleted {
		return w.ignore(rw, provider, "deletion of "+clip(p.Ref))
	}
	if p.Ref != "" && !w.follows(p.Ref) {
		return w.ignore(rw, provider, fmt.Sprintf("push to %s, following %s", clip(p.Ref), w.ref))
	}
	result := w.fire(p.Push)
	w.log.Info("webhook push", "provider", provider, "ref", p.Ref, "revision", p.Revision, "result", result)
	writeJSON(rw, http.StatusAccepted, map[string]string{"status": result})
	return provider, http.StatusAccepted, ""
}

func (w *Webhook) ignore(rw http.ResponseWriter, provider, why string) (string, int, string) {
	w.log.Info("webhook ignored", "provider", provider, "reason", why)
	writeJSON(rw, http.StatusAccepted, map[string]string{"ignored": why})
	return provider, http.StatusAccepted, ""
}

func (w *Webhook) follows(ref string) bool {
	if w.ref == "" {
		return true
	}
	if prefix, ok := strings.CutSuffix(w.ref, "*"); ok {
		return strings.HasPrefix(ref, prefix)
	}
	return ref == w.ref
}

// fire triggers now, or, within MinInterval of the last trigger, makes
// sure one trigger follows at its end: a push seen while a fetch is under
// way is never lost, and a burst of pushes costs one fetch.
func (w *Webhook) fire(p Push) string {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return "coalesced"
	}
	now := time.Now()
	if w.timer == nil && now.Sub(w.last) >= w.interval {
		w.last = now
		w.mu.Unlock()
		w.trigger(p)
		return "accepted"
	}
	w.pending = p
	if w.timer == nil {
		w.timer = time.AfterFunc(w.last.Add(w.interval).Sub(now), w.flush)
	}
	w.mu.Unlock()
	return "coalesced"
}

func (w *Webhook) flush() {
	w.mu.Lock()
	if w.closed || w.timer == nil {
		w.mu.Unlock()
		return
	}
	w.timer = nil
	w.last = time.Now()
	p := w.pending
	w.mu.Unlock()
	w.trigger(p)
}

// validHMAC checks a "sha256=<hex>" signature of body.
func validHMAC(sig string, body, secret []byte) bool {
	hexSig, ok := strings.CutPrefix(sig, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

type push struct {
	Push
	deleted bool
}

// parsePush reads the ref a push names. GitHub and GitLab push payloads
// must be JSON objects with a ref (GitHub may send them form-encoded as
// payload=); a generic body is read the same way when it is a JSON object,
// and otherwise names no ref.
func parsePush(provider, contentType string, body []byte) (push, error) {
	p := push{Push: Push{Provider: provider}}
	if provider == ProviderGitHub {
		if mt, _, _ := mime.ParseMediaType(contentType); mt == "application/x-www-form-urlencoded" && !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
			// GitHub's form encoding: the JSON is the payload field. (A
			// JSON body sent with curl -d's default type is read as JSON.)
			v, err := url.ParseQuery(string(body))
			if err != nil || !v.Has("payload") {
				return p, errors.New("payload: the body is form-encoded (Content-Type: application/x-www-form-urlencoded) without a payload= field; send the JSON as the body with Content-Type: application/json, or set the webhook's content type to application/json")
			}
			body = []byte(v.Get("payload"))
		}
	}
	var doc struct {
		Ref     *string `json:"ref"`
		After   string  `json:"after"`
		Deleted bool    `json:"deleted"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		if provider == ProviderGeneric {
			return p, nil
		}
		return p, errors.New("payload: not a JSON object")
	}
	if doc.Ref == nil || *doc.Ref == "" {
		if provider == ProviderGeneric {
			return p, nil
		}
		return p, errors.New("payload: no ref")
	}
	p.Ref = *doc.Ref
	if isHex(doc.After) {
		p.Revision = doc.After
		p.deleted = strings.Trim(doc.After, "0") == ""
	}
	p.deleted = p.deleted || doc.Deleted
	return p, nil
}

func isHex(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// clip keeps a sender-chosen string short in answers and logs.
func clip(s string) string {
	const n = 200
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func writeJSON(rw http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		code, data = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed"}`)
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("X-Content-Type-Options", "nosniff")
	rw.WriteHeader(code)
	rw.Write(append(data, '\n'))
}
