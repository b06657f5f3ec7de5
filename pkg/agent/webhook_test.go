package agent

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testSecret = "s3cr3t-webhook-value"

func writeSecret(t *testing.T, value string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// pushes records triggers.
type pushes struct {
	mu   sync.Mutex
	list []Push
}

func (p *pushes) add(x Push) { p.mu.Lock(); p.list = append(p.list, x); p.mu.Unlock() }
func (p *pushes) get() []Push {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Push(nil), p.list...)
}

func newTestWebhook(t *testing.T, o WebhookOptions) (*Webhook, *pushes, *httptest.Server) {
	t.Helper()
	got := &pushes{}
	if o.SecretFile == "" {
		o.SecretFile = writeSecret(t, testSecret)
	}
	if o.Ref == "" {
		o.Ref = "refs/heads/main"
	}
	o.Trigger = got.add
	w, err := NewWebhook(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w) // listens on 127.0.0.1
	t.Cleanup(func() { srv.Close(); w.Close() })
	return w, got, srv
}

func post(t *testing.T, url string, header map[string]string, body []byte) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var answer map[string]string
	if err := json.Unmarshal(data, &answer); err != nil {
		t.Fatalf("answer %q is not a JSON object of strings: %v", data, err)
	}
	return resp.StatusCode, answer
}

const sha = "0123456789abcdef0123456789abcdef01234567"

func TestWebhook(t *testing.T) {
	mainPush := []byte(`{"ref":"refs/heads/main","after":"` + sha + `","repository":{"name":"x"}}`)
	otherPush := []byte(`{"ref":"refs/heads/other","after":"` + sha + `"}`)
	deletion := []byte(`{"ref":"refs/heads/main","after":"0000000000000000000000000000000000000000","deleted":true}`)
	big := append([]byte(`{"ref":"refs/heads/main","pad":"`), bytes.Repeat([]byte("x"), MaxWebhookBody)...)
	big = append(big, `"}`...)
	form := []byte("payload=" + url.QueryEscape(string(mainPush)))

	tests := []struct {
		name      string
		header    map[string]string
		body      []byte
		code      int
		answer    map[string]string
		triggered *Push
	}{
		{"github push to main", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(testSecret, mainPush)}, mainPush,
			202, map[string]string{"status": "accepted"}, &Push{ProviderGitHub, "refs/heads/main", sha}},
		{"github form-encoded push", map[string]string{"X-GitHub-Event": "push", "Content-Type": "application/x-www-form-urlencoded", "X-Hub-Signature-256": sign(testSecret, form)}, form,
			202, map[string]string{"status": "accepted"}, &Push{ProviderGitHub, "refs/heads/main", sha}},
		{"github JSON sent as a form (curl -d)", map[string]string{"X-GitHub-Event": "push", "Content-Type": "application/x-www-form-urlencoded", "X-Hub-Signature-256": sign(testSecret, mainPush)}, mainPush,
			202, map[string]string{"status": "accepted"}, &Push{ProviderGitHub, "refs/heads/main", sha}},
		{"github form without a payload field", map[string]string{"X-GitHub-Event": "push", "Content-Type": "application/x-www-form-urlencoded", "X-Hub-Signature-256": sign(testSecret, []byte("ref=main"))}, []byte("ref=main"),
			400, map[string]string{"error": "payload: the body is form-encoded (Content-Type: application/x-www-form-urlencoded) without a payload= field; send the JSON as the body with Content-Type: application/json, or set the webhook's content type to application/json"}, nil},
		{"github signed with another secret", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": sign("wrong", mainPush)}, mainPush,
			401, map[string]string{"error": "invalid signature"}, nil},
		{"github signature of another body", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(testSecret, otherPush)}, mainPush,
			401, map[string]string{"error": "invalid signature"}, nil},
		{"github signature without sha256=", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": strings.TrimPrefix(sign(testSecret, mainPush), "sha256=")}, mainPush,
			401, map[string]string{"error": "invalid signature"}, nil},
		{"github signature not hex", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=zz"}, mainPush,
			401, map[string]string{"error": "invalid signature"}, nil},
		{"github sha1 signature only", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature": "sha1=abc"}, mainPush,
			401, map[string]string{"error": "missing signature: X-Hub-Signature-256, X-Gitlab-Token or X-Signature"}, nil},
		{"no signature", map[string]string{"X-GitHub-Event": "push"}, mainPush,
			401, map[string]string{"error": "missing signature: X-Hub-Signature-256, X-Gitlab-Token or X-Signature"}, nil},
		{"github push to another branch", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(testSecret, otherPush)}, otherPush,
			202, map[string]string{"ignored": "push to refs/heads/other, following refs/heads/main"}, nil},
		{"github branch deletion", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(testSecret, deletion)}, deletion,
			202, map[string]string{"ignored": "deletion of refs/heads/main"}, nil},
		{"github ping", map[string]string{"X-GitHub-Event": "ping", "X-Hub-Signature-256": sign(testSecret, []byte(`{"zen":"x"}`))}, []byte(`{"zen":"x"}`),
			200, map[string]string{"status": "pong"}, nil},
		{"github unsigned ping", map[string]string{"X-GitHub-Event": "ping"}, []byte(`{"zen":"x"}`),
			401, map[string]string{"error": "missing signature: X-Hub-Signature-256, X-Gitlab-Token or X-Signature"}, nil},
		{"github other event", map[string]string{"X-GitHub-Event": "issues", "X-Hub-Signature-256": sign(testSecret, mainPush)}, mainPush,
			202, map[string]string{"ignored": "event issues"}, nil},
		{"github push that is not JSON", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(testSecret, []byte("nope"))}, []byte("nope"),
			400, map[string]string{"error": "payload: not a JSON object"}, nil},
		{"github push without ref", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(testSecret, []byte(`{}`))}, []byte(`{}`),
			400, map[string]string{"error": "payload: no ref"}, nil},
		{"body over 1 MiB", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(testSecret, big)}, big,
			413, map[string]string{"error": "body larger than 1 MiB"}, nil},
		{"gitlab push", map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": testSecret}, mainPush,
			202, map[string]string{"status": "accepted"}, &Push{ProviderGitLab, "refs/heads/main", sha}},
		{"gitlab wrong token", map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": testSecret + "x"}, mainPush,
			401, map[string]string{"error": "invalid token"}, nil},
		{"gitlab wrong token, big body", map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "nope"}, big,
			401, map[string]string{"error": "invalid token"}, nil},
		{"gitlab push to another branch", map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": testSecret}, otherPush,
			202, map[string]string{"ignored": "push to refs/heads/other, following refs/heads/main"}, nil},
		{"gitlab merge request event", map[string]string{"X-Gitlab-Event": "Merge Request Hook", "X-Gitlab-Token": testSecret}, mainPush,
			202, map[string]string{"ignored": "event Merge Request Hook"}, nil},
		{"generic push", map[string]string{"X-Signature": sign(testSecret, mainPush)}, mainPush,
			202, map[string]string{"status": "accepted"}, &Push{ProviderGeneric, "refs/heads/main", sha}},
		{"generic without a ref triggers", map[string]string{"X-Signature": sign(testSecret, []byte("anything"))}, []byte("anything"),
			202, map[string]string{"status": "accepted"}, &Push{Provider: ProviderGeneric}},
		{"generic push to another branch", map[string]string{"X-Signature": sign(testSecret, otherPush)}, otherPush,
			202, map[string]string{"ignored": "push to refs/heads/other, following refs/heads/main"}, nil},
		{"generic bad signature", map[string]string{"X-Signature": sign("nope", mainPush)}, mainPush,
			401, map[string]string{"error": "invalid signature"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got, srv := newTestWebhook(t, WebhookOptions{})
			code, answer := post(t, srv.URL, tt.header, tt.body)
			if code != tt.code {
				t.Errorf("status %d, want %d (answer %v)", code, tt.code, answer)
			}
			if !mapsEqual(answer, tt.answer) {
				t.Errorf("answer %v, want %v", answer, tt.answer)
			}
			list := got.get()
			switch {
			case tt.triggered == nil && len(list) != 0:
				t.Errorf("triggered %v, want nothing", list)
			case tt.triggered != nil && (len(list) != 1 || list[0] != *tt.triggered):
				t.Errorf("triggered %v, want [%v]", list, *tt.triggered)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestWebhookMethod(t *testing.T) {
	_, got, srv := newTestWebhook(t, WebhookOptions{})
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if len(got.get()) != 0 {
		t.Error("GET triggered")
	}
}

func TestWebhookRefPatterns(t *testing.T) {
	tests := []struct {
		follow, push string
		triggered    bool
	}{
		{"refs/tags/*", "refs/tags/v1.2.3", true},
		{"refs/tags/*", "refs/heads/main", false},
		{"refs/tags/v1.2.3", "refs/tags/v1.2.3", true},
		{"refs/tags/v1.2.3", "refs/tags/v1.2.4", false},
		{"refs/heads/main", "refs/heads/main-2", false},
	}
	for _, tt := range tests {
		_, got, srv := newTestWebhook(t, WebhookOptions{Ref: tt.follow})
		body := []byte(`{"ref":"` + tt.push + `"}`)
		post(t, srv.URL, map[string]string{"X-Gitlab-Event": "Tag Push Hook", "X-Gitlab-Token": testSecret}, body)
		if n := len(got.get()); (n == 1) != tt.triggered {
			t.Errorf("following %s, push to %s: %d triggers, want triggered=%v", tt.follow, tt.push, n, tt.triggered)
		}
	}
	if _, err := NewWebhook(WebhookOptions{SecretFile: writeSecret(t, "x"), Ref: "main", Trigger: func(Push) {}}); err == nil {
		t.Error("a short ref name was accepted")
	}
}

func TestWebhookCoalesces(t *testing.T) {
	const interval = time.Second // wide enough for a loaded machine
	_, got, srv := newTestWebhook(t, WebhookOptions{MinInterval: interval})
	body := []byte(`{"ref":"refs/heads/main"}`)
	h := map[string]string{"X-Signature": sign(testSecret, body)}
	start := time.Now()
	want := []string{"accepted", "coalesced", "coalesced", "coalesced"}
	for i, w := range want {
		if _, a := post(t, srv.URL, h, body); a["status"] != w {
			t.Fatalf("push %d: %v, want %s", i, a, w)
		}
	}
	if n := len(got.get()); n != 1 && time.Since(start) < interval {
		t.Fatalf("%d triggers within the interval, want 1", n)
	}
	// The coalesced pushes make one trigger at the end of the interval.
	waitFor(t, 5*time.Second, func() bool { return len(got.get()) == 2 })
	time.Sleep(interval + 100*time.Millisecond)
	if n := len(got.get()); n != 2 {
		t.Errorf("%d triggers, want 2", n)
	}
	if _, a := post(t, srv.URL, h, body); a["status"] != "accepted" {
		t.Errorf("after the interval: %v, want accepted", a)
	}
}

func TestWebhookCloseDropsPending(t *testing.T) {
	w, got, srv := newTestWebhook(t, WebhookOptions{MinInterval: time.Hour})
	body := []byte(`{"ref":"refs/heads/main"}`)
	h := map[string]string{"X-Signature": sign(testSecret, body)}
	post(t, srv.URL, h, body)
	if _, a := post(t, srv.URL, h, body); a["status"] != "coalesced" {
		t.Fatalf("second push: %v, want coalesced", a)
	}
	w.Close()
	w.mu.Lock()
	pending := w.timer != nil
	w.mu.Unlock()
	if pending {
		t.Error("a trigger is still pending after Close")
	}
	w.flush() // as a timer that fired just before Close would
	if _, a := post(t, srv.URL, h, body); a["status"] != "coalesced" {
		t.Errorf("push after Close: %v, want coalesced", a)
	}
	if n := len(got.get()); n != 1 {
		t.Errorf("%d triggers after Close, want 1", n)
	}
}

func TestWebhookSecretRotationAndNeverLogged(t *testing.T) {
	var logs bytes.Buffer
	secretFile := writeSecret(t, testSecret)
	_, got, srv := newTestWebhook(t, WebhookOptions{
		SecretFile: secretFile, MinInterval: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	body := []byte(`{"ref":"refs/heads/main"}`)
	const rotated = "rotated-secret-value"

	if code, _ := post(t, srv.URL, map[string]string{"X-Signature": sign(testSecret, body)}, body); code != 202 {
		t.Fatalf("old secret before rotation: %d", code)
	}
	if err := os.WriteFile(secretFile, []byte(rotated), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _ := post(t, srv.URL, map[string]string{"X-Signature": sign(testSecret, body)}, body); code != 401 {
		t.Errorf("old secret after rotation: %d, want 401", code)
	}
	if code, _ := post(t, srv.URL, map[string]string{"X-Gitlab-Token": testSecret}, body); code != 401 {
		t.Errorf("old token after rotation: %d, want 401", code)
	}
	time.Sleep(time.Millisecond)
	if code, _ := post(t, srv.URL, map[string]string{"X-Signature": sign(rotated, body)}, body); code != 202 {
		t.Errorf("new secret: %d, want 202", code)
	}
	if n := len(got.get()); n != 2 {
		t.Errorf("%d triggers, want 2", n)
	}
	// An emptied secret refuses everything rather than accept anything.
	if err := os.WriteFile(secretFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _ := post(t, srv.URL, map[string]string{"X-Signature": sign("", body)}, body); code != 503 {
		t.Errorf("empty secret file: %d, want 503", code)
	}
	for _, s := range []string{testSecret, rotated} {
		if strings.Contains(logs.String(), s) {
			t.Errorf("the secret %q is in the log:\n%s", s, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "webhook rejected") {
		t.Errorf("rejections not logged:\n%s", logs.String())
	}
}

func TestNewWebhookErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	tests := []struct {
		name string
		o    WebhookOptions
		want string
	}{
		{"no secret file", WebhookOptions{Trigger: func(Push) {}}, "set webhookSecretFile (--webhook-secret-file)"},
		{"missing secret file", WebhookOptions{SecretFile: filepath.Join(dir, "nope"), Trigger: func(Push) {}}, "webhookSecretFile (--webhook-secret-file): stat"},
		{"empty secret file", WebhookOptions{SecretFile: empty, Trigger: func(Push) {}}, "empty"},
		{"no trigger", WebhookOptions{SecretFile: writeSecret(t, "x")}, "no trigger"},
	}
	for _, tt := range tests {
		_, err := NewWebhook(tt.o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FuzzWebhook: whatever arrives, nothing is triggered unless the request
// is authentic, every answer is a JSON object, and the handler never panics.
func FuzzWebhook(f *testing.F) {
	f.Add(uint8(0), "push", true, "", []byte(`{"ref":"refs/heads/main"}`))
	f.Add(uint8(1), "Push Hook", true, "", []byte(`{"ref":"refs/heads/main","after":"`+sha+`"}`))
	f.Add(uint8(2), "", false, "sha256=00", []byte(`{"ref":"refs/heads/main"}`))
	secretFile := filepath.Join(f.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(testSecret), 0o600); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, provider uint8, event string, signed bool, sig string, body []byte) {
		var n atomic.Int32
		w, err := NewWebhook(WebhookOptions{SecretFile: secretFile, Ref: "refs/heads/main", Trigger: func(Push) { n.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		req := httptest.NewRequest(http.MethodPost, "/hooks/git", bytes.NewReader(body))
		var authentic bool
		switch provider % 4 {
		case 0:
			req.Header.Set("X-GitHub-Event", event)
			if signed {
				sig = sign(testSecret, body)
			}
			req.Header.Set("X-Hub-Signature-256", sig)
			authentic = sig == sign(testSecret, body)
		case 1:
			req.Header.Set("X-Gitlab-Event", event)
			if signed {
				sig = testSecret
			}
			req.Header.Set("X-Gitlab-Token", sig)
			authentic = sig == testSecret
		case 2:
			if signed {
				sig = sign(testSecret, body)
			}
			req.Header.Set("X-Signature", sig)
			authentic = sig == sign(testSecret, body)
		case 3: // unsigned, with an event header
			req.Header.Set("X-GitHub-Event", event)
		}
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, req)
		var answer map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
			t.Fatalf("answer %q is not a JSON object of strings: %v", rec.Body.Bytes(), err)
		}
		code, triggered := rec.Code, n.Load()
		// An HMAC is checked once the body is read, so an oversized
		// inauthentic body is answered 413; either way nothing runs.
		if !authentic && (triggered != 0 || (code != http.StatusUnauthorized && code != http.StatusRequestEntityTooLarge)) {
			t.Fatalf("inauthentic request: status %d, %d triggers, answer %v", code, triggered, answer)
		}
		if triggered > 1 || (triggered == 1) != (answer["status"] == "accepted") {
			t.Fatalf("%d triggers, answer %v", triggered, answer)
		}
		switch code {
		case 200, 202, 400, 401, 413:
		default:
			t.Fatalf("status %d", code)
		}
	})
}
