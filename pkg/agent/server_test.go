package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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

// do sends a request as the CLI does: a POST carries ControlHeader, and
// the bearer token when there is one.
func do(t *testing.T, method, url, token string) (int, string, http.Header) {
	t.Helper()
	h := http.Header{}
	if method == http.MethodPost {
		h.Set(ControlHeader, "1")
	}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return doWith(t, method, url, "", h)
}

// doWith sends a request with exactly the headers h (and Host, when set).
func doWith(t *testing.T, method, url, host string, h http.Header) (int, string, http.Header) {
	t.Helper()
	var body io.Reader
	if h.Get("Content-Type") != "" {
		body = strings.NewReader("x")
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer), resp.Header
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
		Resume:    func(context.Context) (string, error) { resumes.Add(1); return "resumed", nil },
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
		{"POST", "/api/v1/resume", 200, `{"message":"resumed","suspended":false}`},
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
	resume := func(ctx context.Context) (string, error) { return "resumed", count(ctx) }
	_, base := startServer(t, ServerOptions{TokenFile: tokenFile, Reconcile: count, Suspend: count, Resume: resume,
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
	// The HMAC is the hook's authentication: a proxy's public Host and a
	// form body (GitHub's other content type) are no reason to refuse it.
	h := headers("X-Hub-Signature-256", sign(testSecret, body), "X-GitHub-Event", "push", "Content-Type", "application/x-www-form-urlencoded")
	req, _ := http.NewRequest("POST", base+"/hooks/git", strings.NewReader("payload="+url.QueryEscape(string(body))))
	req.Header, req.Host = h, "hooks.example.com"
	req.Header.Set("X-Hub-Signature-256", sign(testSecret, []byte("payload="+url.QueryEscape(string(body)))))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 202 || !strings.Contains(string(answer), `"status"`) { // accepted, or coalesced with the first
		t.Errorf("signed push through a proxy: %d %q", resp.StatusCode, answer)
	}
	if n := len(got.get()); n < 1 {
		t.Errorf("%d triggers, want at least 1 (a burst is one)", n)
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

// controlServer runs a server whose control verbs count what they are
// asked, and returns its base URL and the count of each verb.
func controlServer(t *testing.T, tokenFile string) (string, map[string]*atomic.Int32) {
	t.Helper()
	calls := map[string]*atomic.Int32{}
	for _, v := range controlVerbs {
		calls[v] = &atomic.Int32{}
	}
	count := func(v string) func(context.Context) error {
		return func(context.Context) error { calls[v].Add(1); return nil }
	}
	_, base := startServer(t, ServerOptions{
		TokenFile: tokenFile,
		Registry:  prometheus.NewRegistry(),
		Status:    func(context.Context) (any, error) { return map[string]string{"stateDir": "/var/lib/cortex-sync"}, nil },
		Fleet:     func(context.Context) (any, error) { return map[string]string{"hosts": "web1"}, nil },
		Reconcile: count("reconcile"),
		Suspend:   count("suspend"),
		Resume: func(ctx context.Context) (string, error) {
			return "resumed", count("resume")(ctx)
		},
		Rollback: func(context.Context, string) (string, error) {
			calls["rollback"].Add(1)
			return "main@sha1:abc", nil
		},
		Retry: func(context.Context) (string, error) { calls["retry"].Add(1); return "main@sha1:abc", nil },
	})
	return base, calls
}

var controlVerbs = []string{"reconcile", "suspend", "resume", "rollback", "retry"}

func controlPath(verb string) string {
	if verb == "rollback" {
		return "/api/v1/rollback?to=abc"
	}
	return "/api/v1/" + verb
}

func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// TestServerRefusesWebPages: with no token on loopback, a page open in a
// browser on the host sent "simple" cross-site POSTs to every control verb
// and was obeyed (the host rolled back, the agent suspended). Each is
// refused now, and nothing is called.
func TestServerRefusesWebPages(t *testing.T) {
	base, calls := controlServer(t, "")
	port := strings.TrimPrefix(base, "http://127.0.0.1")
	attacks := []struct {
		name string
		h    http.Header
	}{
		{"cross-site simple POST", headers("Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site", "Content-Type", "text/plain")},
		{"form POST from another site", headers("Origin", "http://evil.example", "Content-Type", "application/x-www-form-urlencoded")},
		{"same-site page", headers("Sec-Fetch-Site", "same-site", ControlHeader, "1")},
		{"another origin with the header", headers("Origin", "http://evil.example", ControlHeader, "1")},
		{"another port of loopback", headers("Origin", "http://127.0.0.1:8080", ControlHeader, "1")},
		{"a sandboxed page", headers("Origin", "null", "Content-Type", "application/json")},
		{"older browser, no Origin, simple", headers("Content-Type", "text/plain")},
		{"no header at all", headers()},
		{"multipart form", headers("Content-Type", "multipart/form-data; boundary=x")},
		{"cross-site JSON (after a refused preflight)", headers("Sec-Fetch-Site", "cross-site", "Content-Type", "application/json")},
	}
	for _, verb := range controlVerbs {
		for _, a := range attacks {
			code, body, _ := doWith(t, "POST", base+controlPath(verb), "", a.h)
			if code != http.StatusForbidden || !strings.Contains(body, "refused") {
				t.Errorf("%s to %s: %d %q, want 403 refused", a.name, verb, code, body)
			}
		}
		if n := calls[verb].Load(); n != 0 {
			t.Errorf("%s called %d times by web pages", verb, n)
		}
	}
	// A preflight is no way in either: it is no read, and grants nothing.
	code, _, hdr := doWith(t, "OPTIONS", base+"/api/v1/suspend", "", headers("Origin", "http://evil.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", ControlHeader))
	if code/100 == 2 || hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from another site: %d, Access-Control-Allow-Origin %q", code, hdr.Get("Access-Control-Allow-Origin"))
	}

	// What the CLI sends, a JSON body, or the agent's own origin pass.
	allowed := []struct {
		name string
		h    http.Header
	}{
		{"the CLI's header", headers(ControlHeader, "1")},
		{"a JSON body", headers("Content-Type", "application/json; charset=utf-8")},
		{"the agent's own origin", headers("Origin", "http://127.0.0.1"+port, "Sec-Fetch-Site", "same-origin", ControlHeader, "1")},
		{"typed in the address bar", headers("Sec-Fetch-Site", "none", ControlHeader, "1")},
	}
	for _, verb := range controlVerbs {
		for _, a := range allowed {
			if code, body, _ := doWith(t, "POST", base+controlPath(verb), "", a.h); code/100 != 2 {
				t.Errorf("%s to %s: %d %q, want it served", a.name, verb, code, body)
			}
		}
		if n := calls[verb].Load(); n != int32(len(allowed)) {
			t.Errorf("%s called %d times, want %d", verb, n, len(allowed))
		}
	}
}

// TestServerRefusesRebinding: a page that rebinds its own name to
// 127.0.0.1 reads what it asks for as same-origin; it was served the
// whole status document. Every endpoint now refuses a Host that does not
// name this agent.
func TestServerRefusesRebinding(t *testing.T) {
	base, calls := controlServer(t, "")
	port := strings.TrimPrefix(base, "http://127.0.0.1")
	paths := []string{"/api/v1/status", "/api/v1/fleet", "/metrics", "/healthz", "/readyz", "/nothing"}
	for _, host := range []string{"evil.example", "evil.example" + port, "127.0.0.1.evil.example" + port, "localhost.evil.example", "EVIL.example.", "[::2]" + port, "10.0.0.1" + port} {
		for _, path := range paths {
			code, body, _ := doWith(t, "GET", base+path, host, http.Header{})
			if code != http.StatusMisdirectedRequest || strings.Contains(body, "/var/lib/cortex-sync") || !strings.Contains(body, "is not this agent's address") {
				t.Errorf("GET %s with Host %q: %d %q, want 421 naming the Host", path, host, code, body)
			}
		}
		for _, verb := range controlVerbs {
			if code, _, _ := doWith(t, "POST", base+controlPath(verb), host, headers(ControlHeader, "1", "Content-Type", "application/json")); code != http.StatusMisdirectedRequest {
				t.Errorf("POST %s with Host %q: %d, want 421", verb, host, code)
			}
		}
	}
	for verb, n := range calls {
		if n.Load() != 0 {
			t.Errorf("%s called %d times with a foreign Host", verb, n.Load())
		}
	}
	// Loopback by any name and port (a tunnel changes the port) is this agent.
	for _, host := range []string{"127.0.0.1" + port, "127.0.0.1", "localhost" + port, "LOCALHOST", "localhost.", "127.0.0.2:1", "[::1]" + port, "[::1]"} {
		if code, body, _ := doWith(t, "GET", base+"/api/v1/status", host, http.Header{}); code != 200 {
			t.Errorf("GET status with Host %q: %d %q", host, code, body)
		}
	}
}

func TestHostSet(t *testing.T) {
	name, _ := os.Hostname()
	tests := []struct {
		listen, bound string
		allowed       []string
		refused       []string
	}{
		{"127.0.0.1:9797", "127.0.0.1:9797", []string{"127.0.0.1:9797", "localhost", "127.1.2.3", "[::1]:80", "[0:0:0:0:0:0:0:1]"}, []string{"", "evil.example", name, "10.0.0.1", "[::2]:9797"}},
		{"localhost:9797", "127.0.0.1:9797", []string{"localhost:9797", "127.0.0.1"}, []string{"evil.example:9797", "localhost.evil.example"}},
		{"10.1.2.3:9797", "10.1.2.3:9797", []string{"10.1.2.3:9797", "10.1.2.3", "localhost", strings.ToUpper(name) + ":9797"}, []string{"evil.example", "10.1.2.4:9797"}},
		{"[fd00::1]:9797", "[fd00::1]:9797", []string{"[fd00::1]:9797", "[FD00:0::1]"}, []string{"[fd00::2]", "evil.example"}},
		{"web1.example.com:9797", "10.1.2.3:9797", []string{"web1.example.com:9797", "WEB1.example.com.", "10.1.2.3"}, []string{"web2.example.com", "evil.example"}},
		{"0.0.0.0:9797", "0.0.0.0:9797", []string{"evil.example", "10.0.0.1", "localhost"}, nil},
		{":9797", "[::]:9797", []string{"evil.example"}, nil},
		{"[::]:9797", "[::]:9797", []string{"web1.example.com"}, nil},
	}
	for _, tt := range tests {
		bound, err := net.ResolveTCPAddr("tcp", tt.bound)
		if err != nil {
			t.Fatal(err)
		}
		hs := newHostSet(tt.listen, bound)
		for _, h := range tt.allowed {
			if !hs.allows(h) {
				t.Errorf("listening on %s: Host %q refused", tt.listen, h)
			}
		}
		for _, h := range tt.refused {
			if hs.allows(h) {
				t.Errorf("listening on %s: Host %q allowed", tt.listen, h)
			}
		}
	}
}

// TestServerTokenAndBrowsers: with a token, a client that sends it (curl,
// a script) needs no other header; a browser's cross-site request is
// refused even with it.
func TestServerTokenAndBrowsers(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("tok-1\n"), 0o600)
	base, calls := controlServer(t, tokenFile)
	for _, verb := range controlVerbs {
		if code, body, _ := doWith(t, "POST", base+controlPath(verb), "", headers("Authorization", "Bearer tok-1")); code/100 != 2 {
			t.Errorf("POST %s with the token alone: %d %q", verb, code, body)
		}
		if code, _, _ := doWith(t, "POST", base+controlPath(verb), "", headers(ControlHeader, "1")); code != http.StatusUnauthorized {
			t.Errorf("POST %s with the header and no token: %d, want 401", verb, code)
		}
		if code, _, _ := doWith(t, "POST", base+controlPath(verb), "", headers("Authorization", "Bearer tok-1", "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site")); code != http.StatusForbidden {
			t.Errorf("POST %s cross-site with the token: %d, want 403", verb, code)
		}
		if n := calls[verb].Load(); n != 1 {
			t.Errorf("%s called %d times, want 1", verb, n)
		}
	}
}
