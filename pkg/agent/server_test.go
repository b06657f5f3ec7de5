package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// startServer runs a real Server on a free loopback port until the test
// ends, and returns its base URL.
func startServer(t *testing.T, o ServerOptions) (*Server, string) {
	t.Helper()
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	s, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, "http://" + s.Addr().String()
}

func do(t *testing.T, method, url, token string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

func TestServerEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.ObserveReconcile(TriggerManual, ResultSuccess, time.Second)
	var ready testReadiness
	var reconciles, suspends, resumes atomic.Int32
	_, base := startServer(t, ServerOptions{
		Registry: reg,
		Ready:    ready.Check,
		Status: func(context.Context) (any, error) {
			return map[string]any{"revision": "main@sha1:abc", "sync": "Synced", "health": "Healthy", "resources": []any{}}, nil
		},
		Reconcile: func(context.Context) error { reconciles.Add(1); return nil },
		Suspend:   func(context.Context) error { suspends.Add(1); return nil },
		Resume:    func(context.Context) error { resumes.Add(1); return nil },
	})

	tests := []struct {
		method, path string
		code         int
		body         string // contained in the answer
	}{
		{"GET", "/healthz", 200, "ok"},
		{"GET", "/readyz", 503, "not ready: first reconcile not done"},
		{"GET", "/metrics", 200, `cortexsync_reconcile_total{result="success",trigger="manual"} 1`},
		{"GET", "/api/v1/status", 200, `"revision": "main@sha1:abc"`},
		{"POST", "/api/v1/status", 405, ""},
		{"GET", "/api/v1/reconcile", 405, ""},
		{"POST", "/api/v1/reconcile", 202, `{"status":"accepted"}`},
		{"POST", "/api/v1/suspend", 200, `{"suspended":true}`},
		{"POST", "/api/v1/resume", 200, `{"suspended":false}`},
		{"POST", "/hooks/git", 404, ""}, // no webhook configured
		{"GET", "/nothing", 404, ""},
	}
	for _, tt := range tests {
		code, body, hdr := do(t, tt.method, base+tt.path, "")
		if code != tt.code || !strings.Contains(body, tt.body) {
			t.Errorf("%s %s: %d %q, want %d containing %q", tt.method, tt.path, code, body, tt.code, tt.body)
		}
		if tt.path == "/api/v1/status" && code == 200 {
			if ct := hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("status Content-Type %q", ct)
			}
			var doc map[string]any
			if err := json.Unmarshal([]byte(body), &doc); err != nil || doc["health"] != "Healthy" {
				t.Errorf("status document %q: %v", body, err)
			}
		}
	}
	if reconciles.Load() != 1 || suspends.Load() != 1 || resumes.Load() != 1 {
		t.Errorf("callbacks: %d reconcile, %d suspend, %d resume; want 1 each", reconciles.Load(), suspends.Load(), resumes.Load())
	}

	ready.SetReconciled()
	if code, body, _ := do(t, "GET", base+"/readyz", ""); code != 200 {
		t.Errorf("readyz after the first reconcile: %d %q", code, body)
	}
	ready.SetSourceError(errors.New("fetch origin: connection refused"))
	if code, body, _ := do(t, "GET", base+"/readyz", ""); code != 503 || !strings.Contains(body, "source failing: fetch origin: connection refused") {
		t.Errorf("readyz with a failing source: %d %q", code, body)
	}
	ready.SetSourceError(nil)
	if code, _, _ := do(t, "GET", base+"/readyz", ""); code != 200 {
		t.Errorf("readyz after the source recovered: %d", code)
	}
}

func TestServerCallbackErrorsAndMissingCallbacks(t *testing.T) {
	_, base := startServer(t, ServerOptions{
		Status:    func(context.Context) (any, error) { return nil, errors.New("no snapshot yet") },
		Reconcile: func(context.Context) error { return errors.New("agent is stopping") },
	})
	tests := []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/api/v1/status", 500, "no snapshot yet"},
		{"POST", "/api/v1/reconcile", 503, "agent is stopping"},
		{"POST", "/api/v1/suspend", 501, "suspend is not available here"},
		{"GET", "/readyz", 200, "ok"}, // no Ready: always ready
		{"GET", "/metrics", 404, ""},  // no Registry
	}
	for _, tt := range tests {
		if code, body, _ := do(t, tt.method, base+tt.path, ""); code != tt.code || !strings.Contains(body, tt.body) {
			t.Errorf("%s %s: %d %q, want %d containing %q", tt.method, tt.path, code, body, tt.code, tt.body)
		}
	}
}

func TestServerBearerToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("tok-1\n"), 0o600)
	var calls atomic.Int32
	count := func(context.Context) error { calls.Add(1); return nil }
	_, base := startServer(t, ServerOptions{TokenFile: tokenFile, Reconcile: count, Suspend: count, Resume: count,
		Status: func(context.Context) (any, error) { return map[string]string{}, nil }})

	for _, path := range []string{"/api/v1/reconcile", "/api/v1/suspend", "/api/v1/resume"} {
		for _, tok := range []string{"", "tok-2", "tok-1x", "tok"} {
			code, _, hdr := do(t, "POST", base+path, tok)
			if code != 401 || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("POST %s with token %q: %d, want 401 with WWW-Authenticate", path, tok, code)
			}
		}
		if code, _, _ := do(t, "POST", base+path, "tok-1"); code/100 != 2 {
			t.Errorf("POST %s with the token: %d", path, code)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d callbacks, want 3 (the authorized ones)", n)
	}
	// Reading status needs no token.
	if code, _, _ := do(t, "GET", base+"/api/v1/status", ""); code != 200 {
		t.Errorf("status without a token: %d", code)
	}
	// A rotated token takes effect at once.
	os.WriteFile(tokenFile, []byte("tok-2"), 0o600)
	if code, _, _ := do(t, "POST", base+"/api/v1/reconcile", "tok-1"); code != 401 {
		t.Errorf("old token after rotation: %d", code)
	}
	if code, _, _ := do(t, "POST", base+"/api/v1/reconcile", "tok-2"); code != 202 {
		t.Errorf("new token: %d", code)
	}
	// A token file gone refuses rather than opens.
	os.Remove(tokenFile)
	if code, _, _ := do(t, "POST", base+"/api/v1/reconcile", "tok-2"); code != 503 {
		t.Errorf("token file gone: %d, want 503", code)
	}
}

func TestNewServerRefusals(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("t"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	tests := []struct {
		name string
		o    ServerOptions
		want string // "" = accepted
	}{
		{"loopback without token", ServerOptions{Addr: "127.0.0.1:0"}, ""},
		{"localhost without token", ServerOptions{Addr: "localhost:0"}, ""},
		{"ipv6 loopback without token", ServerOptions{Addr: "[::1]:0"}, ""},
		{"all interfaces without token", ServerOptions{Addr: "0.0.0.0:0"}, "listen 0.0.0.0:0 reaches beyond loopback: set tokenFile (--token-file)"},
		{"empty host without token", ServerOptions{Addr: ":0"}, "set tokenFile (--token-file)"},
		{"ipv6 any without token", ServerOptions{Addr: "[::]:0"}, "set tokenFile (--token-file)"},
		{"a host name without token", ServerOptions{Addr: "example.invalid:0"}, "set tokenFile (--token-file)"},
		{"all interfaces with token", ServerOptions{Addr: "0.0.0.0:0", TokenFile: token}, ""},
		{"missing token file", ServerOptions{TokenFile: filepath.Join(dir, "nope")}, "tokenFile (--token-file): stat"},
		{"empty token file", ServerOptions{TokenFile: empty}, "tokenFile (--token-file):"},
		{"no port", ServerOptions{Addr: "127.0.0.1"}, `listen "127.0.0.1"`},
	}
	for _, tt := range tests {
		s, err := NewServer(tt.o)
		if err == nil {
			closeServer(s)
		}
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

func TestNewServerBusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := NewServer(ServerOptions{Addr: ln.Addr().String()}); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("busy port: %v", err)
	}
}

func TestServerDefaultAddr(t *testing.T) {
	s, err := NewServer(ServerOptions{})
	if err != nil {
		t.Skipf("default address not free here: %v", err)
	}
	defer closeServer(s)
	if got := s.Addr().String(); got != DefaultAddr {
		t.Errorf("Addr() = %s, want %s", got, DefaultAddr)
	}
}

func TestServerWebhook(t *testing.T) {
	got := &pushes{}
	w, err := NewWebhook(WebhookOptions{SecretFile: writeSecret(t, testSecret), Ref: "refs/heads/main", Trigger: got.add})
	if err != nil {
		t.Fatal(err)
	}
	_, base := startServer(t, ServerOptions{Webhook: w})
	body := []byte(`{"ref":"refs/heads/main"}`)
	if code, a := post(t, base+"/hooks/git", map[string]string{"X-Hub-Signature-256": sign(testSecret, body), "X-GitHub-Event": "push"}, body); code != 202 || a["status"] != "accepted" {
		t.Errorf("signed push: %d %v", code, a)
	}
	if code, _ := post(t, base+"/hooks/git", map[string]string{"X-GitHub-Event": "push"}, body); code != 401 {
		t.Errorf("unsigned push: %d", code)
	}
	if code, _, _ := do(t, "GET", base+"/hooks/git", ""); code != 405 {
		t.Errorf("GET /hooks/git: %d", code)
	}
	if n := len(got.get()); n != 1 {
		t.Errorf("%d triggers, want 1", n)
	}
}

func TestServeDrainsInFlightRequests(t *testing.T) {
	entered := make(chan struct{})
	s, err := NewServer(ServerOptions{Addr: "127.0.0.1:0", Status: func(ctx context.Context) (any, error) {
		close(entered)
		select {
		case <-time.After(300 * time.Millisecond):
			return map[string]string{"done": "yes"}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr().String() + "/api/v1/status")
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answer <- resp.Status + " " + string(b)
	}()
	<-entered
	cancel()
	if got := <-answer; !strings.HasPrefix(got, "200") || !strings.Contains(got, `"done": "yes"`) {
		t.Errorf("in-flight request during shutdown: %q", got)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := net.DialTimeout("tcp", s.Addr().String(), time.Second); err == nil {
		t.Error("still listening after Serve returned")
	}
}

func TestServeShutdownIsBounded(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	s, err := NewServer(ServerOptions{Addr: "127.0.0.1:0", ShutdownTimeout: 200 * time.Millisecond,
		Status: func(context.Context) (any, error) {
			close(entered)
			<-release // a handler that ignores its context
			return nil, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	go func() {
		resp, err := http.Get("http://" + s.Addr().String() + "/api/v1/status")
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	cancel()
	// The handler never returns: without the bound, Serve would not either.
	select {
	case <-served:
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30s of its context ending, with a 200ms shutdown bound")
	}
}

// closeServer releases a server's listener: it serves, and stops at once.
func closeServer(s *Server) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.Serve(ctx)
}

// testReadiness is a readiness callback set by the test: ready once the
// first reconcile is done, and while the source is not failing.
type testReadiness struct {
	mu         sync.Mutex
	reconciled bool
	sourceErr  error
}

func (r *testReadiness) SetReconciled() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reconciled = true
}

func (r *testReadiness) SetSourceError(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sourceErr = err
}

func (r *testReadiness) Check(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.sourceErr != nil:
		return fmt.Errorf("source failing: %w", r.sourceErr)
	case !r.reconciled:
		return errors.New("first reconcile not done")
	}
	return nil
}
