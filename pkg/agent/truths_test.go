package agent_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/syncbuf"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
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
	logs := &syncbuf.Buffer{}
	a := runAgent(t, h.repo, agent.Options{Log: slog.New(slog.NewTextHandler(logs, nil)),
		Engine: reconcile.Config{Root: h.root, StateDir: h.state, Concurrency: 2, LockTimeout: 10 * time.Second}})
	waitFor(t, 30*time.Second, "the agent ready", func() bool { ok, _ := a.Ready(); return ok })
	if !strings.Contains(logs.String(), "msg=\"revision adopted: applying what it changes\" revision=\"\" changed=2\n") {
		t.Errorf("the revision adopted on start does not say changed=2:\n%s", logs)
	}
}

// gathered is the value of a family's one series: a counter's or gauge's
// value, a histogram's sample count.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// TestDriftJudgedOnTheLookThatActs: a hand edit that lands after a worker
// took the key and before it acts (here: while it waits for the state
// lock, which the test holds) is judged on the look the apply acts on:
// drift, counted in the drift metrics, logged corrective, and fed to the
// fight detector. An agent that judged on a look taken when it took the
// key (the file then as desired, only touched) healed the edit as
// "intentional", uncounted, and never saw the fight.
func TestDriftJudgedOnTheLookThatActs(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(repo, "all.yaml"), file("a", "/etc/a", ""))
	reg := agent.NewRegistry()
	logs := &syncbuf.Buffer{}
	a := runAgent(t, repo, agent.Options{Metrics: agent.NewMetrics(reg), Log: slog.New(slog.NewTextHandler(logs, nil)),
		FightThreshold: 1, // a second correction makes a fight: the detector was fed
		Engine:         reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 1, LockTimeout: 30 * time.Second}})
	waitFor(t, 30*time.Second, "the first reconcile", func() bool { ok, _ := a.Ready(); return ok })
	target := filepath.Join(root, "etc/a")

	ctx := context.Background()
	applies := gathered(t, reg, "cortexsync_apply_total")
	for round := 1; round <= 2; round++ {
		// Hold the state lock: a worker that takes the key waits for it.
		lock, err := state.At(stateDir).Lock(ctx, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// The file touched, its content as desired: the watch adds the key
		// and a worker takes it, then waits for the lock; or a worker took
		// it before the touch (the heal's own write was an event too) and
		// waits already, the add folded into it: the queue then reports a
		// processor running (updated every 500ms), and a depth of 1 for the
		// add that waits for it. An add is seen twice, a poll apart, so it
		// is not caught before its push.
		adds := gathered(t, reg, "cortexsync_workqueue_adds_total")
		writeFile(t, target, "a\n")
		held := 0
		waitFor(t, 10*time.Second, "the touched key held by a worker", func() bool {
			if gathered(t, reg, "cortexsync_workqueue_longest_running_processor_seconds") > 0 {
				return true
			}
			if gathered(t, reg, "cortexsync_workqueue_adds_total") > adds && gathered(t, reg, "cortexsync_workqueue_depth") == 0 {
				held++
			} else {
				held = 0
			}
			return held == 2
		})
		// Now the hand edit, then the lock let go.
		writeFile(t, target, "hand edit\n")
		lock.Unlock()
		waitFor(t, 10*time.Second, "the edit healed", func() bool {
			b, _ := os.ReadFile(target)
			return string(b) == "a\n" && gathered(t, reg, "cortexsync_apply_total") >= applies+float64(round)
		})
	}
	if n := gathered(t, reg, "cortexsync_drift_corrected_total"); n != 2 {
		t.Errorf("drift corrected: %v, want 2", n)
	}
	if n := gathered(t, reg, "cortexsync_drift_detected_total"); n != 2 {
		t.Errorf("drift detected: %v, want 2", n)
	}
	if !strings.Contains(logs.String(), "msg=applied resource=File/a revision=\"\" action=update reason=driftedOnHost change=corrective") {
		t.Errorf("the heal is not logged as a corrective change for drift:\n%s", logs)
	}
	if f := a.Status(ctx).Fighting; !slices.Contains(f, "File/a") {
		t.Errorf("fighting %v: the correction did not reach the fight detector", f)
	}
}

// TestNoWatchInsideTheStateDir: a File whose path leads into the state dir
// through a symlink on the host (to state.json itself) is refused where it
// is written; the agent
// does not watch the state dir for it, so its own saves (one after each
// failure) do not set the key off again: it is retried on its backoff, a
// few times in a few seconds, not ~45 times a second as before.
func TestNoWatchInsideTheStateDir(t *testing.T) {
	repo, root := t.TempDir(), t.TempDir()
	stateDir := filepath.Join(root, "var/lib/cortex-sync")
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/var/lib/cortex-sync", filepath.Join(root, "alias")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(repo, "f.yaml"), "apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: x}\nspec: {path: /alias/state.json, content: \"{}\"}\n")
	reg := agent.NewRegistry()
	runAgent(t, repo, agent.Options{Metrics: agent.NewMetrics(reg), RetryBase: 500 * time.Millisecond,
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	waitFor(t, 30*time.Second, "the first refusal", func() bool { return gathered(t, reg, "cortexsync_apply_total") >= 1 })
	time.Sleep(3 * time.Second)
	if n := gathered(t, reg, "cortexsync_apply_total"); n > 10 {
		t.Fatalf("%v applies of a refused File in 3 s: its own saves set it off", n)
	}
	if b, err := os.ReadFile(filepath.Join(stateDir, "state.json")); err != nil || string(b) == "{}" {
		t.Fatalf("the snapshot was written over: %q %v", b, err)
	}
}
