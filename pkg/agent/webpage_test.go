package agent_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
)

// serveAgent serves a's API on a free loopback port, wired as cortex-sync
// run wires it, until the test ends; it returns the base URL.
func serveAgent(t *testing.T, a *agent.Agent) string {
	t.Helper()
	srv, err := agent.NewServer(agent.ServerOptions{
		Addr:      "127.0.0.1:0",
		Status:    func(ctx context.Context) (any, error) { return a.Status(ctx), nil },
		Reconcile: func(context.Context) error { a.Reconcile(agent.TriggerManual); return nil },
		Suspend:   func(context.Context) error { a.Suspend(); return nil },
		Resume:    a.Resume,
		Rollback:  a.Rollback,
		Retry:     a.Retry,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + srv.Addr().String()
}

// send sends one request and returns its status code and body.
func send(t *testing.T, method, url, host string, h http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	if host != "" {
		req.Host = host
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func appFile(v string) map[string]*string {
	return map[string]*string{"app.yaml": gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: app}\nspec: {path: /etc/app.conf, content: \"version " + v + "\\n\"}\n")}
}

// TestWebPageCannotDriveTheAgent: an agent on loopback with no token,
// following a real git daemon. A page in a browser on the host rolled it
// back to an old revision and suspended it with simple cross-site POSTs,
// and read its status by rebinding a name to 127.0.0.1. Now each is
// refused and the host stays where it is; the CLI's request still moves it.
func TestWebPageCannotDriveTheAgent(t *testing.T) {
	h := newLKGHost(t)
	v1 := h.commit("first", appFile("1"))
	h.startGood(v1)
	v2 := h.commit("second", appFile("2"))
	h.fetch()
	h.waitFor(30*time.Second, "the second revision good", func() bool {
		st := h.status()
		return st.LastGood != nil && st.LastGood.Revision == v2 && read(h.conf) == "version 2\n"
	})
	base := serveAgent(t, h.a)

	page := http.Header{}
	page.Set("Origin", "http://evil.example")
	page.Set("Sec-Fetch-Site", "cross-site")
	page.Set("Content-Type", "text/plain")
	for _, path := range []string{"/api/v1/rollback?to=" + v1, "/api/v1/retry", "/api/v1/reconcile", "/api/v1/resume", "/api/v1/suspend"} {
		if code, body := send(t, "POST", base+path, "", page.Clone()); code != http.StatusForbidden {
			t.Errorf("a page's POST %s: %d %q, want 403", path, code, body)
		}
	}
	if code, body := send(t, "GET", base+"/api/v1/status", "evil.example", http.Header{}); code != http.StatusMisdirectedRequest || strings.Contains(body, h.stateDir) {
		t.Errorf("a rebound page's GET /api/v1/status: %d %q, want 421 without the document", code, body)
	}
	time.Sleep(200 * time.Millisecond) // what a rollback would have started
	st := h.status()
	if st.Agent == nil || st.Agent.Suspended || st.OnRollback != nil || st.Revision != v2 || read(h.conf) != "version 2\n" {
		t.Fatalf("after the page's requests: suspended %v, on rollback %+v, revision %s, conf %q; want all as before (%s)",
			st.Agent != nil && st.Agent.Suspended, st.OnRollback, st.Revision, read(h.conf), v2)
	}

	// The CLI's requests (its header, no token) still drive it.
	cli := http.Header{}
	cli.Set(agent.ControlHeader, "1")
	if code, body := send(t, "POST", base+"/api/v1/rollback?to="+v1, "", cli.Clone()); code != http.StatusOK || !strings.Contains(body, v1) {
		t.Fatalf("the CLI's rollback: %d %q", code, body)
	}
	h.waitFor(30*time.Second, "rolled back to the first revision by hand", func() bool {
		st := h.status()
		return st.OnRollback != nil && st.Revision == v1 && read(h.conf) == "version 1\n"
	})
	if code, body := send(t, "POST", base+"/api/v1/suspend", "", cli.Clone()); code != http.StatusOK {
		t.Fatalf("the CLI's suspend: %d %q", code, body)
	}
	if st := h.status(); st.Agent == nil || !st.Agent.Suspended {
		t.Errorf("not suspended after the CLI's suspend: %+v", st.Agent)
	}
	if code, body := send(t, "GET", base+"/api/v1/status", "", http.Header{}); code != http.StatusOK || !strings.Contains(body, v1) {
		t.Errorf("GET /api/v1/status: %d %q", code, body)
	}
}
