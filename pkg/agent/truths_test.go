package agent_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Behaviours the agent promised without a test of their own (issue 19).

// restarts reads cortexsync_process_restarts_total for one reason.
func restarts(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cortexsync_process_restarts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestRestartOnIsCounted: a Process restarted because a File it restartOn's
// changed in Git counts one restart with reason="restart_on", none as a
// spec change.
func TestRestartOnIsCounted(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	manifest := func(config string) string {
		return `apiVersion: cortex-sync/v1alpha1
kind: File
metadata: {name: config}
spec: {path: /etc/app.conf, content: "` + config + `"}
---
apiVersion: cortex-sync/v1alpha1
kind: Process
metadata: {name: app}
spec:
  command: [sleep, "100000"]
  stopTimeout: 1s
  restartOn: [File/config]
`
	}
	writeFile(t, filepath.Join(repo, "all.yaml"), manifest("one"))
	t.Cleanup(func() { stopAll(t, repo, root, stateDir) })
	reg := agent.NewRegistry()
	a := runAgent(t, repo, agent.Options{Metrics: agent.NewMetrics(reg),
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	waitFor(t, 30*time.Second, "the first reconcile", func() bool { ok, _ := a.Ready(); return ok })

	writeFile(t, filepath.Join(repo, "all.yaml"), manifest("two"))
	a.Reconcile(agent.TriggerManual)
	waitFor(t, 30*time.Second, "restart counted", func() bool {
		return restarts(t, reg, "restart_on")+restarts(t, reg, "spec_change") >= 1
	})
	a.Status(context.Background())
	if n := restarts(t, reg, "restart_on"); n != 1 {
		t.Errorf("restart_on restarts: %v, want 1", n)
	}
	if n := restarts(t, reg, "spec_change"); n != 0 {
		t.Errorf("spec_change restarts: %v, want 0 (only a restartOn target changed)", n)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

// TestStartCountsEachKeyOnce: an agent started on a state dir whose
// inventory holds the desired resources (any restart) looks at each once:
// the revision it adopts says it changed two keys for two resources, not
// four (each listed as desired and again as inventory).
func TestStartCountsEachKeyOnce(t *testing.T) {
	h := newParityHost(t)
	writeFile(t, filepath.Join(h.repo, "all.yaml"), file("a", "/etc/a", "")+"---\n"+file("b", "/etc/b", ""))
	if _, err := syncHost(t, h, reconcile.Policy{}); err != nil {
		t.Fatal(err)
	}
	logs := &syncedBuffer{}
	a := runAgent(t, h.repo, agent.Options{Log: slog.New(slog.NewTextHandler(logs, nil)),
		Engine: reconcile.Config{Root: h.root, StateDir: h.state, Concurrency: 2, LockTimeout: 10 * time.Second}})
	waitFor(t, 30*time.Second, "the agent ready", func() bool { ok, _ := a.Ready(); return ok })
	if !strings.Contains(logs.String(), "msg=revision revision=\"\" changed=2\n") {
		t.Errorf("the revision adopted on start does not say changed=2:\n%s", logs)
	}
}
