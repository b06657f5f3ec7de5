package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/notify/notifytest"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

func newHook(t *testing.T, key string) *notifytest.Hook {
	h := notifytest.NewHook(key)
	t.Cleanup(h.Server.Close)
	return h
}

func newForge(t *testing.T, typ Type, token, repo string) *notifytest.Forge {
	f := notifytest.NewForge(string(typ), token, repo)
	t.Cleanup(f.Server.Close)
	return f
}

// bodies are the signed bodies h accepted.
func bodies(t *testing.T, h *notifytest.Hook) []Payload {
	t.Helper()
	var out []Payload
	for _, b := range h.Bodies() {
		var p Payload
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

const (
	shaA = "0123456789abcdef0123456789abcdef01234567"
	shaB = "89abcdef0123456789abcdef0123456789abcdef"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// start makes and runs a notifier until the test ends; it returns the
// notifier, its metrics and its log.
func start(t *testing.T, c Config, o Options) (*Notifier, *Metrics, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	o.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if o.Metrics == nil {
		o.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	if o.Backoff == 0 {
		o.Backoff = 10 * time.Millisecond
	}
	n, err := New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return n, o.Metrics, logs
}

// logBuffer is a log the notifier writes while the test reads it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// eventually waits for cond, failing the test after 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func dur(d time.Duration) *resource.Duration { r := resource.Duration(d); return &r }

func counter(m *Metrics, c func(*Metrics) *prometheus.CounterVec, typ string) float64 {
	return testutil.ToFloat64(c(m).WithLabelValues(typ))
}

func sentOf(m *Metrics) *prometheus.CounterVec    { return m.sentTotal }
func failedOf(m *Metrics) *prometheus.CounterVec  { return m.failedTotal }
func droppedOf(m *Metrics) *prometheus.CounterVec { return m.droppedTotal }
func retriesOf(m *Metrics) *prometheus.CounterVec { return m.retriesTotal }

// TestWebhookSignedBody: one JSON body per event, signed with the
// secretFile's key; a receiver with another key refuses it.
func TestWebhookSignedBody(t *testing.T) {
	hook := newHook(t, "s3cret")
	secret := writeFile(t, "secret", "s3cret\n") // a trailing newline is not part of the key
	n, m, _ := start(t, Config{Type: Webhook, URL: hook.Server.URL + "/hooks/cortex", SecretFile: secret}, Options{Host: "web1"})
	e := events.Event{Time: time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC), Host: "web1", Severity: events.Warning,
		Reason: events.DriftCorrected, Resource: "File/motd", Revision: "main@sha1:" + shaA, Message: "put back: content changed on the host"}
	n.Emit(e)
	eventually(t, "the webhook", func() bool { return len(hook.Bodies()) == 1 })
	if r := hook.Refused(); r != 0 {
		t.Fatalf("refused %d", r)
	}
	if got := bodies(t, hook)[0]; got.Event != e || got.Count != 0 || got.Recovered {
		t.Errorf("body %+v, want the event %+v", got, e)
	}
	if counter(m, sentOf, "webhook") != 1 {
		t.Errorf("sent %v", counter(m, sentOf, "webhook"))
	}

	// Signed with another key: the receiver refuses, the agent counts a failure.
	other := newHook(t, "another")
	n2, m2, _ := start(t, Config{Type: Webhook, URL: other.Server.URL, SecretFile: secret}, Options{})
	n2.Emit(e)
	eventually(t, "the failure", func() bool { return counter(m2, failedOf, "webhook") == 1 })
	if b, refused := other.Bodies(), other.Refused(); len(b) != 0 || refused != 1 {
		t.Errorf("another key: accepted %d, refused %d", len(b), refused)
	}
}

// TestSlackText: a Slack-compatible webhook gets {"text": …}, one line.
func TestSlackText(t *testing.T) {
	hook := newHook(t, "")
	n, _, logs := start(t, Config{Type: Slack, URL: hook.Server.URL + "/services/T000/B000/XXXXSECRET"}, Options{})
	n.Emit(events.Event{Host: "web1", Severity: events.Error, Reason: events.RevisionBad, Revision: "main@sha1:" + shaA, Message: "Process/api failed its probe"})
	eventually(t, "the message", func() bool { return len(hook.Texts()) == 1 })
	texts := hook.Texts()
	if want := "web1 error RevisionBad: Process/api failed its probe [main@sha1:" + shaA + "]"; texts[0] != want {
		t.Errorf("text %q, want %q", texts[0], want)
	}
	if strings.Contains(logs.String(), "XXXXSECRET") {
		t.Errorf("the webhook's URL is in the log:\n%s", logs)
	}
}

// TestCommitStatusPerHost: each forge, as its API documents it; two hosts
// on one commit keep their own status (cortex-sync/<host>): one good,
// one bad and rolled back.
func TestCommitStatusPerHost(t *testing.T) {
	for _, tc := range []struct {
		typ                        Type
		repo, gitURL               string
		pending, success, rolledBk string
	}{
		{GitHub, "acme/infra", "git@github.com:acme/infra.git", "pending", "success", "failure"},
		{GitLab, "acme/ops/infra", "https://gitlab.example.com/acme/ops/infra.git", "running", "success", "failed"},
		{Gitea, "acme/infra", "ssh://git@gitea.example.com:2222/acme/infra.git", "pending", "success", "failure"},
	} {
		t.Run(string(tc.typ), func(t *testing.T) {
			fake := newForge(t, tc.typ, "tok-123", tc.repo)
			token := writeFile(t, "token", "tok-123\n")
			c := Config{Type: tc.typ, URL: fake.Server.URL, TokenFile: token}
			web1, m1, logs := start(t, c, Options{Host: "web1", GitURL: tc.gitURL})
			web2, _, _ := start(t, c, Options{Host: "web2", GitURL: tc.gitURL})
			rev := "main@sha1:" + shaA
			applied := events.Event{Severity: events.Info, Reason: events.RevisionApplied, Revision: rev, Condition: "revision", Message: "applied in full; on trial"}
			web1.Emit(applied)
			web2.Emit(applied)
			eventually(t, "pending on both", func() bool {
				return fake.Status(shaA, "cortex-sync/web1") == tc.pending && fake.Status(shaA, "cortex-sync/web2") == tc.pending
			})
			web1.Emit(events.Event{Severity: events.Info, Reason: events.RevisionGood, Revision: rev, Message: "healthy for 30s"})
			web2.Emit(events.Event{Severity: events.Error, Reason: events.RevisionBad, Revision: rev, Message: strings.Repeat("Process/api failed its probe; ", 20)})
			// The rollback names the revision gone back to: the failure stays on the bad one.
			web2.Emit(events.Event{Severity: events.Warning, Reason: events.RevisionRolledBack, Revision: "main@sha1:" + shaB, Message: "rolled back to main@sha1:" + shaB})
			// The revision gone back to is applied again, not on trial (no
			// condition): the status it has stands.
			web2.Emit(events.Event{Severity: events.Info, Reason: events.RevisionApplied, Revision: "main@sha1:" + shaB,
				Message: "applied in full: a rollback holds the host on it while the source's head is " + rev})
			// Not a commit status's business.
			web1.Emit(events.Event{Severity: events.Warning, Reason: events.DriftCorrected, Resource: "File/motd", Revision: rev})
			eventually(t, "the verdicts", func() bool {
				return fake.Status(shaA, "cortex-sync/web1") == tc.success && fake.Status(shaA, "cortex-sync/web2") == tc.rolledBk &&
					len(fake.Requests()) >= 5
			})
			time.Sleep(20 * time.Millisecond) // nothing more comes
			if s := fake.Status(shaB, "cortex-sync/web2"); s != "" {
				t.Errorf("the revision rolled back to got %q", s)
			}
			refused, n := fake.Refused(), len(fake.Requests())
			if len(refused) != 0 || n != 5 {
				t.Errorf("%d requests (want 5: two pending, good, bad, rolled back), refused: %q", n, refused)
			}
			if counter(m1, sentOf, string(tc.typ)) != 2 {
				t.Errorf("web1 sent %v, want 2", counter(m1, sentOf, string(tc.typ)))
			}

			// A wrong token: refused by the forge, counted, and not logged.
			bad := writeFile(t, "bad", "tok-wrong")
			c.TokenFile = bad
			web3, m3, logs3 := start(t, c, Options{Host: "web3", GitURL: tc.gitURL})
			web3.Emit(applied)
			eventually(t, "the failure", func() bool { return counter(m3, failedOf, string(tc.typ)) == 1 })
			for _, l := range []string{logs.String(), logs3.String()} {
				if strings.Contains(l, "tok-") {
					t.Errorf("a token is in the log:\n%s", l)
				}
			}
			if !strings.Contains(logs3.String(), "401") {
				t.Errorf("the failure's log does not say why:\n%s", logs3)
			}
		})
	}
}

// TestDedup: the same event within the window is told once, then once
// more with its count; another event is told at once.
func TestDedup(t *testing.T) {
	hook := newHook(t, "k")
	const window = 300 * time.Millisecond
	n, _, _ := start(t, Config{Type: Webhook, URL: hook.Server.URL, SecretFile: writeFile(t, "k", "k"), Dedup: dur(window)}, Options{})
	e := events.Event{Host: "web1", Severity: events.Warning, Reason: events.FightStarted, Resource: "File/motd", Message: "undone 5 times in 10m"}
	for range 3 {
		n.Emit(e)
	}
	n.Emit(events.Event{Host: "web1", Severity: events.Info, Reason: events.DriftCorrected, Resource: "File/other", Message: "put back"})
	eventually(t, "the first two", func() bool { return len(hook.Bodies()) >= 2 })
	time.Sleep(window / 2)
	if b := bodies(t, hook); len(b) != 2 {
		t.Fatalf("%d bodies within the window, want 2 (the repeats held): %+v", len(b), b)
	}
	eventually(t, "the count", func() bool { return len(hook.Bodies()) == 3 })
	b := bodies(t, hook)
	if got := b[2]; got.Count != 3 || got.Window != "300ms" || got.Message != "undone 5 times in 10m (×3 in 300ms)" {
		t.Errorf("the repeat: count %d window %q message %q", got.Count, got.Window, got.Message)
	}
	// After the window, the same event is new again: told at once.
	n.Emit(e)
	eventually(t, "the event again", func() bool { return len(hook.Bodies()) == 4 })
	if b := bodies(t, hook); b[3].Count != 0 || b[3].Message != e.Message {
		t.Errorf("after the window: %+v", b[3])
	}
	// A repeat told once and no more: nothing more once the window ends.
	time.Sleep(2 * window)
	if b := hook.Bodies(); len(b) != 4 {
		t.Errorf("%d bodies, want 4", len(b))
	}
}

// TestRecovered: an info event that clears a condition a told warning
// raised is told as recovered, even past a severity filter; one whose
// condition was never raised is filtered as any info event.
func TestRecovered(t *testing.T) {
	hook := newHook(t, "k")
	n, _, _ := start(t, Config{Type: Webhook, URL: hook.Server.URL, SecretFile: writeFile(t, "k", "k"), Severity: events.Warning}, Options{})
	failing := events.Event{Host: "web1", Severity: events.Warning, Reason: events.SourceFailing, Message: "fetch: connection refused", Condition: "source"}
	n.Emit(failing)
	n.Emit(events.Event{Host: "web1", Severity: events.Info, Reason: events.FightEnded, Resource: "File/motd", Condition: "fight:File/motd"}) // never raised
	n.Emit(events.Event{Host: "web1", Severity: events.Info, Reason: events.SourceRecovered, Message: "fetched main@sha1:" + shaA, Condition: "source"})
	n.Emit(events.Event{Host: "web1", Severity: events.Info, Reason: events.SourceRecovered, Message: "again", Condition: "source"}) // already cleared
	eventually(t, "the recovery", func() bool { return len(hook.Bodies()) >= 2 })
	time.Sleep(50 * time.Millisecond)
	b := bodies(t, hook)
	if len(b) != 2 {
		t.Fatalf("%d bodies, want 2 (failing, recovered): %+v", len(b), b)
	}
	got := b[1]
	if !got.Recovered || got.Reason != events.SourceRecovered || got.Raised == nil || got.Raised.Reason != events.SourceFailing {
		t.Errorf("recovered body %+v", got)
	}
	if txt := Text(got.Event, 0, 0, got.Raised); txt != "web1 recovered SourceRecovered: fetched main@sha1:"+shaA+" (was SourceFailing: fetch: connection refused)" {
		t.Errorf("text %q", txt)
	}
}

// TestEndpointDown: an endpoint that takes the connection and never
// answers holds up delivery, never Emit: the queue stays bounded, the
// rest is dropped and counted.
func TestEndpointDown(t *testing.T) {
	hang := make(chan struct{})
	srv := newHook(t, "")
	srv.Answer = func(w http.ResponseWriter, _ int) bool { <-hang; return true }
	defer close(hang)
	const queue = 16
	n, m, _ := start(t, Config{Type: Slack, URL: srv.Server.URL}, Options{QueueSize: queue, Client: &http.Client{Timeout: time.Minute}})
	const emitted = 20000
	began := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range emitted {
			n.Emit(events.Event{Severity: events.Warning, Reason: events.DriftCorrected, Resource: "File/f", Message: "n" + string(rune('a'+i%26)) + time.Duration(i).String()})
		}
	}()
	// The endpoint never answers: an Emit that waited for delivery would
	// never return. The bound only ends the test sooner than go test's.
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Emit blocks on an endpoint that never answers")
	}
	took := time.Since(began)
	if l := len(n.queue); l > queue {
		t.Errorf("queue %d > %d", l, queue)
	}
	// One in flight (hanging), queue waiting, the rest dropped.
	eventually(t, "the drops counted", func() bool { return counter(m, droppedOf, "slack") >= emitted-queue-1 })
	t.Logf("%d Emits in %v (%v each) against a hanging endpoint; dropped %v", emitted, took, took/emitted, counter(m, droppedOf, "slack"))

	// Nobody listening at all: refused connections are retried, bounded, then failed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	n2, m2, logs := start(t, Config{Type: Slack, URL: "http://" + addr + "/services/T0/B0/SECRETPATH"}, Options{Attempts: 3})
	n2.Emit(events.Event{Severity: events.Error, Reason: events.ProcessFailed, Resource: "Process/api"})
	eventually(t, "the failure", func() bool { return counter(m2, failedOf, "slack") == 1 })
	if r := counter(m2, retriesOf, "slack"); r != 2 {
		t.Errorf("retries %v, want 2 (3 attempts)", r)
	}
	if strings.Contains(logs.String(), "SECRETPATH") || !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("the log names the webhook's secret path, or not why it failed:\n%s", logs)
	}
}

// TestRateLimited: a 429 with Retry-After is retried after that long,
// not before and not again and again; a 500 is retried with backoff,
// a 400 is not retried.
func TestRateLimited(t *testing.T) {
	hook := newHook(t, "")
	hook.Answer = func(w http.ResponseWriter, n int) bool {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "rate_limited", http.StatusTooManyRequests)
			return true
		}
		return false
	}
	n, m, _ := start(t, Config{Type: Slack, URL: hook.Server.URL}, Options{})
	n.Emit(events.Event{Severity: events.Error, Reason: events.RevisionBad, Message: "bad"})
	eventually(t, "the retry", func() bool { return len(hook.Texts()) == 1 })
	times := hook.Requests()
	if len(times) != 2 {
		t.Fatalf("%d requests, want 2", len(times))
	}
	if gap := times[1].Sub(times[0]); gap < time.Second {
		t.Errorf("retried after %v: Retry-After said 1s", gap)
	}
	if counter(m, retriesOf, "slack") != 1 || counter(m, sentOf, "slack") != 1 {
		t.Errorf("retries %v sent %v", counter(m, retriesOf, "slack"), counter(m, sentOf, "slack"))
	}

	for _, tc := range []struct {
		code     int
		requests int
	}{{http.StatusInternalServerError, 3}, {http.StatusBadRequest, 1}, {http.StatusForbidden, 1}} {
		h := newHook(t, "")
		h.Answer = func(w http.ResponseWriter, _ int) bool { http.Error(w, "no", tc.code); return true }
		n, m, _ := start(t, Config{Type: Slack, URL: h.Server.URL}, Options{Attempts: 3})
		n.Emit(events.Event{Severity: events.Error, Reason: events.RevisionBad})
		eventually(t, "the failure", func() bool { return counter(m, failedOf, "slack") == 1 })
		time.Sleep(50 * time.Millisecond)
		got := len(h.Requests())
		if got != tc.requests {
			t.Errorf("%d: %d requests, want %d", tc.code, got, tc.requests)
		}
	}

	// A Retry-After beyond MaxDelay: given up, not retried early.
	h := newHook(t, "")
	h.Answer = func(w http.ResponseWriter, _ int) bool {
		w.Header().Set("Retry-After", "3600")
		http.Error(w, "later", http.StatusTooManyRequests)
		return true
	}
	n3, m3, _ := start(t, Config{Type: Slack, URL: h.Server.URL}, Options{MaxDelay: time.Minute})
	n3.Emit(events.Event{Severity: events.Error, Reason: events.RevisionBad})
	eventually(t, "given up", func() bool { return counter(m3, failedOf, "slack") == 1 })
	if r := len(h.Requests()); r != 1 {
		t.Errorf("%d requests, want 1", r)
	}
}

// TestForgeRateLimited: GitHub's primary limit (403, x-ratelimit-remaining
// 0) waits for x-ratelimit-reset; GitLab's and Gitea's 429 for Retry-After.
func TestForgeRateLimited(t *testing.T) {
	for _, typ := range []Type{GitHub, GitLab, Gitea} {
		t.Run(string(typ), func(t *testing.T) {
			fake := newForge(t, typ, "tok", "acme/infra")
			fake.Limit(1)
			n, m, _ := start(t, Config{Type: typ, URL: fake.Server.URL, TokenFile: writeFile(t, "t", "tok"), Repository: "acme/infra"}, Options{Host: "web1"})
			n.Emit(events.Event{Severity: events.Info, Reason: events.RevisionGood, Revision: "v1.2.0@sha1:" + shaA})
			eventually(t, "the status", func() bool { return fake.Status(shaA, "cortex-sync/web1") == "success" })
			times := fake.Requests()
			if len(times) != 2 {
				t.Fatalf("%d requests, want 2", len(times))
			}
			// GitHub: not before the reset; the others: Retry-After's second.
			if typ == GitHub && times[1].Before(fake.ResetAt()) {
				t.Errorf("retried at %v, before the reset at %v", times[1], fake.ResetAt())
			}
			if gap := times[1].Sub(times[0]); typ != GitHub && gap < time.Second {
				t.Errorf("retried after %v", gap)
			}
			if counter(m, retriesOf, string(typ)) != 1 {
				t.Errorf("retries %v", counter(m, retriesOf, string(typ)))
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tok := "/etc/cortex-sync/gh-token"
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{URL: "https://x"}, "type is required"},
		{Config{Type: "teams", URL: "https://x"}, `type "teams": use one of webhook, slack, github, gitlab, gitea`},
		{Config{Type: Webhook}, "url is required"},
		{Config{Type: Webhook, URL: "ftp://x/y"}, "url must be an http:// or https:// URL"},
		{Config{Type: Slack, URL: "https://x", SecretFile: "/s"}, "secretFile is a webhook's HMAC key"},
		{Config{Type: Webhook, URL: "https://x", TokenFile: tok}, "tokenFile is a forge's token"},
		{Config{Type: GitHub}, "tokenFile is required"},
		{Config{Type: Webhook, URL: "https://x", Repository: "a/b"}, "repository names a forge's repository"},
		{Config{Type: Webhook, URL: "https://x", Severity: "warn"}, `severity "warn": use info, warning or error`},
		{Config{Type: Webhook, URL: "https://x", Reasons: []events.Reason{"RevisionBda"}}, `reasons: unknown reason "RevisionBda" (did you mean "RevisionBad"?)`},
		{Config{Type: Webhook, URL: "https://x", Exclude: []events.Reason{"Nope"}}, `exclude: unknown reason "Nope"`},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
	if _, err := Parse(`{type: webhook, url: "https://x", secretFil: /s}`); err == nil || !strings.Contains(err.Error(), "field secretFil not found") {
		t.Errorf("unknown field: %v", err)
	}
	c, err := Parse(`{type: github, tokenFile: /etc/t, reasons: [RevisionGood], dedup: 1m}`)
	if err != nil || c.window() != time.Minute || c.Reasons[0] != events.RevisionGood {
		t.Errorf("parse: %+v %v", c, err)
	}
	if c2, err := Parse(c.String()); err != nil || c2.String() != c.String() {
		t.Errorf("String %q does not parse back: %v", c.String(), err)
	}
	// Refused at New: what needs the rest of the agent's settings.
	if _, err := New(Config{Type: GitHub, TokenFile: writeFile(t, "t", "x")}, Options{Host: "h", GitURL: ""}); err == nil || !strings.Contains(err.Error(), "repository is required") {
		t.Errorf("no repository: %v", err)
	}
	if _, err := New(Config{Type: GitHub, TokenFile: filepath.Join(t.TempDir(), "none")}, Options{Host: "h", GitURL: "https://github.com/a/b"}); err == nil || !strings.Contains(err.Error(), "tokenFile") {
		t.Errorf("missing token file: %v", err)
	}
	if _, err := New(Config{Type: Webhook, URL: "https://x", SecretFile: writeFile(t, "e", "\n")}, Options{}); err == nil || !strings.Contains(err.Error(), "secretFile") || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty secret file: %v", err)
	}
}

func TestResolveForge(t *testing.T) {
	for _, tc := range []struct {
		typ           Type
		gitURL, given string
		api, repo     string
	}{
		{GitHub, "https://github.com/acme/infra.git", "", "https://api.github.com", "acme/infra"},
		{GitHub, "git@github.com:acme/infra.git", "", "https://api.github.com", "acme/infra"},
		{GitHub, "https://ghe.example.com/acme/infra", "", "https://ghe.example.com/api/v3", "acme/infra"},
		{GitLab, "ssh://git@gitlab.example.com:2222/acme/ops/infra.git", "", "https://gitlab.example.com/api/v4", "acme/ops/infra"},
		{GitLab, "https://gitlab.example.com/acme/infra.git", "1234", "https://gitlab.example.com/api/v4", "1234"},
		{Gitea, "https://git.example.com/gitea/acme/infra.git", "", "https://git.example.com/api/v1", "acme/infra"},
		{GitHub, "/srv/git/infra", "acme/infra", "https://api.github.com", "acme/infra"},
	} {
		got, err := resolveForge(Config{Type: tc.typ, Repository: tc.given}, tc.gitURL)
		if err != nil || got.api != tc.api || got.repo != tc.repo {
			t.Errorf("%s %s: %+v %v, want %s %s", tc.typ, tc.gitURL, got, err, tc.api, tc.repo)
		}
	}
	if _, err := resolveForge(Config{Type: GitHub}, "/srv/git/infra"); err == nil {
		t.Error("a local path names no repository")
	}
	if _, err := resolveForge(Config{Type: Gitea, Repository: "infra"}, ""); err == nil || !strings.Contains(err.Error(), "write owner/name") {
		t.Errorf("bad repository: %v", err)
	}
}

func TestMetricsReRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := NewMetrics(reg), NewMetrics(reg) // a config reload
	a.sent("webhook")
	if got := testutil.ToFloat64(b.sentTotal.WithLabelValues("webhook")); got != 1 {
		t.Errorf("the second registration does not share the counter: %v", got)
	}
}
