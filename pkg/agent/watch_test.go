package agent_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// TestAgentWatchesWhatARevisionMade: a commit that adds nested directories
// to a mirrored tree converges those entries alone, and every directory it
// made is watched: a hand edit deep inside is healed at once, with the
// drift scan an hour away; so is one in directories made by hand with
// mkdir -p. Inner directories made before their parent's watch existed
// went unwatched.
func TestAgentWatchesWhatARevisionMade(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("tree", mirrorTree(100))
	root := t.TempDir()
	a := agent.New(agent.Options{
		Engine:   reconcile.Config{Root: root, StateDir: t.TempDir(), Concurrency: 2, LockTimeout: 10 * time.Second},
		Source:   &source.Git{URL: "file://" + repo.Dir, Branch: "main", Path: ".", Cache: state.At(t.TempDir()), Timeout: 20 * time.Second},
		Interval: time.Hour, DriftInterval: time.Hour, SelfHeal: true,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 30*time.Second, "ready", func() bool { ok, _ := a.Ready(); return ok })

	deep := filepath.Join(root, "srv/kb/new/a/b/c/x.md")
	repo.Commit("nested", map[string]*string{"kb/new/a/b/c/x.md": gittest.S("x\n"), "kb/new/a/y.md": gittest.S("y\n")})
	a.Reconcile(agent.TriggerWebhook)
	waitFor(t, 10*time.Second, "the new entries", func() bool { b, _ := os.ReadFile(deep); return string(b) == "x\n" })
	time.Sleep(100 * time.Millisecond) // the watches follow the apply's events
	writeFile(t, deep, "hand edit\n")
	waitFor(t, 5*time.Second, "the deep edit healed", func() bool { b, _ := os.ReadFile(deep); return string(b) == "x\n" })

	// Directories made by hand with mkdir -p, then a commit that puts a
	// file in the deepest: an edit of it is healed at once.
	hand := filepath.Join(root, "srv/kb/d000/h1/h2/h3")
	if err := os.MkdirAll(hand, 0o755); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	repo.Commit("into hand-made directories", map[string]*string{"kb/d000/h1/h2/h3/z.md": gittest.S("z\n")})
	a.Reconcile(agent.TriggerWebhook)
	z := filepath.Join(hand, "z.md")
	waitFor(t, 10*time.Second, "the file in hand-made directories", func() bool { b, _ := os.ReadFile(z); return string(b) == "z\n" })
	writeFile(t, z, "hand edit\n")
	waitFor(t, 5*time.Second, "the edit in hand-made directories healed", func() bool { b, _ := os.ReadFile(z); return string(b) == "z\n" })
}

// kernel stands in for the kernel's inotify watches: while full, a watch
// on a directory it refuses is refused with ENOSPC, as
// inotify_add_watch does past fs.inotify.max_user_watches; every other
// goes to the real kernel.
type kernel struct {
	full    atomic.Bool
	refuses func(dir string) bool
	refused atomic.Int64 // watches refused so far
}

func (k *kernel) wrap(add func(string) error) func(string) error {
	return func(dir string) error {
		if k.full.Load() && k.refuses(dir) {
			k.refused.Add(1)
			return &os.PathError{Op: "inotify_add_watch", Path: dir, Err: syscall.ENOSPC}
		}
		return add(dir)
	}
}

// watchedAgent runs an agent on a 100-file mirror (/srv/kb, two
// directories of files) and a File in /var/x, its watches added through
// k, its drift scan every scan; it serves its API on a free port.
func watchedAgent(t *testing.T, k *kernel, scan, retryBase, retryMax time.Duration) (a *agent.Agent, reg *prometheus.Registry, root, stateDir, api string) {
	t.Helper()
	repo := gittest.NewRepo(t)
	files := mirrorTree(100)
	files["x.yaml"] = gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: x}\nspec: {path: /var/x/f.conf, content: \"desired\\n\"}\n")
	repo.Commit("tree", files)
	root, stateDir, reg = t.TempDir(), t.TempDir(), agent.NewRegistry()
	a = agent.New(agent.Options{
		Engine:   reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second},
		Source:   &source.Git{URL: "file://" + repo.Dir, Branch: "main", Path: ".", Cache: state.At(t.TempDir()), Timeout: 20 * time.Second},
		Interval: time.Hour, DriftInterval: scan, SelfHeal: true,
		Metrics: agent.NewMetrics(reg),
	})
	agent.SetWatchKernel(a, k.wrap, retryBase, retryMax)
	srv, err := agent.NewServer(agent.ServerOptions{Addr: "127.0.0.1:0", Registry: reg,
		Ready: func(context.Context) error {
			if ok, why := a.Ready(); !ok {
				return errors.New(why)
			}
			return nil
		},
		Degraded: func(context.Context) string { return a.Degraded() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- a.Run(ctx) }()
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	waitFor(t, 30*time.Second, "ready", func() bool { ok, _ := a.Ready(); return ok })
	return a, reg, root, stateDir, "http://" + srv.Addr().String()
}

// watchCondition is what every surface says of the watches: the status
// condition, the report status reads, /readyz and the gauge.
type watchCondition struct {
	condition string // conditions.watches
	report    *reconcile.WatchReport
	readyz    string
	code      int
	gauge     float64
}

func watchesSaid(t *testing.T, a *agent.Agent, reg *prometheus.Registry, stateDir, api string) watchCondition {
	t.Helper()
	var c watchCondition
	c.condition = a.Status(context.Background()).Conditions.Watches
	if r := reconcile.ReadAgentReport(state.At(stateDir)); r != nil {
		c.report = r.Watches
	}
	resp, err := http.Get(api + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.readyz, c.code = strings.TrimSpace(string(b)), resp.StatusCode
	c.gauge = testutil.ToFloat64(gauge(reg, "cortexsync_watch_unwatched_directories"))
	return c
}

// TestAgentWatchesOnceTheLimitAllows: out of inotify watches, the
// directories of a mirror are not watched, and every surface says so
// (status condition and report, /readyz 200 with the detail, the gauge)
// for as long as it lasts, retries refused included; once the kernel
// allows them (a raised sysctl, which nothing can observe), the retry
// watches them all, the condition clears, and a hand edit deep in the
// mirror is healed at once, the drift scan an hour away. Before, a
// failed watch was recorded as watched and never retried: the agent
// stayed scan-only until restarted, and said so in one log line.
func TestAgentWatchesOnceTheLimitAllows(t *testing.T) {
	k := &kernel{refuses: func(string) bool { return true }}
	k.full.Store(true)
	a, reg, root, stateDir, api := watchedAgent(t, k, time.Hour, 5*time.Millisecond, 20*time.Millisecond)

	var said watchCondition
	waitFor(t, 10*time.Second, "the lack of watches reported", func() bool {
		said = watchesSaid(t, a, reg, stateDir, api)
		return said.condition != "" && said.report != nil && said.report.Unwatched > 0 && said.gauge > 0 && strings.HasPrefix(said.readyz, "ok, degraded: out of inotify watches")
	})
	if w := a.Watches(); w.Watched != 0 || w.Unwatched < 4 {
		t.Errorf("every watch refused: %d directories recorded watched, %d unwatched; want 0 and each of /srv/kb, its two directories and /var/x", w.Watched, w.Unwatched)
	}
	if said.code != http.StatusOK || !strings.Contains(said.readyz, "fs.inotify.max_user_watches") {
		t.Errorf("/readyz out of watches: %d %q; want 200 (the drift scan heals) saying what to raise", said.code, said.readyz)
	}
	if !strings.Contains(said.report.Error, "no space left on device") || said.report.Since.IsZero() {
		t.Errorf("report: %+v; want the kernel's refusal and since when", said.report)
	}

	// Still out of watches: retried, and still said, however many retries.
	for n := k.refused.Load() + 5; k.refused.Load() < n; {
		waitFor(t, 10*time.Second, "retries", func() bool { return k.refused.Load() >= n })
	}
	if said = watchesSaid(t, a, reg, stateDir, api); said.condition == "" || said.gauge == 0 || !strings.HasPrefix(said.readyz, "ok, degraded:") {
		t.Fatalf("the condition went while it lasted: %+v", said)
	}

	k.full.Store(false) // the sysctl raised
	waitFor(t, 10*time.Second, "every directory watched", func() bool {
		said = watchesSaid(t, a, reg, stateDir, api)
		return said.condition == "" && said.gauge == 0 && said.readyz == "ok" && said.report != nil && said.report.Unwatched == 0
	})
	if w := a.Watches(); w.Watched < 4 || w.Unwatched != 0 {
		t.Errorf("after the limit was raised: %d watched, %d unwatched", w.Watched, w.Unwatched)
	}
	deep := filepath.Join(root, "srv/kb/d001/f00077.md")
	writeFile(t, deep, "hand edit\n")
	waitFor(t, 10*time.Second, "the edit healed by its watch", func() bool { b, _ := os.ReadFile(deep); return string(b) == "file 77\n" })
}

// TestAgentWatchFreedRetriesAtOnce: when one of the agent's own watches
// frees (a watched directory removed), the unwatched directories are
// retried at once, not at the next backoff (an hour here).
func TestAgentWatchFreedRetriesAtOnce(t *testing.T) {
	k := &kernel{refuses: func(dir string) bool { return strings.Contains(dir, "/srv") }}
	k.full.Store(true)
	a, reg, root, stateDir, api := watchedAgent(t, k, time.Hour, time.Hour, time.Hour)
	waitFor(t, 10*time.Second, "the mirror unwatched", func() bool { return watchesSaid(t, a, reg, stateDir, api).gauge > 0 })
	if w := a.Watches(); w.Watched == 0 {
		t.Fatalf("/var/x not watched: %+v", w)
	}

	k.full.Store(false) // the limit raised: nothing says so but a watch that frees
	if err := os.RemoveAll(filepath.Join(root, "var/x")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the mirror watched", func() bool { return watchesSaid(t, a, reg, stateDir, api).gauge == 0 })
	deep := filepath.Join(root, "srv/kb/d000/f00007.md")
	writeFile(t, deep, "hand edit\n")
	waitFor(t, 10*time.Second, "the edit healed by its watch", func() bool { b, _ := os.ReadFile(deep); return string(b) == "file 7\n" })
}

// TestAgentScanCoversUnwatched: out of watches for good, a hand edit in
// an unwatched directory is healed by the drift scan.
func TestAgentScanCoversUnwatched(t *testing.T) {
	k := &kernel{refuses: func(dir string) bool { return strings.Contains(dir, "/srv") }}
	k.full.Store(true)
	a, reg, root, stateDir, api := watchedAgent(t, k, 200*time.Millisecond, time.Hour, time.Hour)
	waitFor(t, 10*time.Second, "the mirror unwatched", func() bool { return watchesSaid(t, a, reg, stateDir, api).gauge > 0 })
	deep := filepath.Join(root, "srv/kb/d001/f00077.md")
	writeFile(t, deep, "hand edit\n")
	waitFor(t, 10*time.Second, "the edit healed by the drift scan", func() bool { b, _ := os.ReadFile(deep); return string(b) == "file 77\n" })
	if said := watchesSaid(t, a, reg, stateDir, api); said.gauge == 0 || said.condition == "" {
		t.Errorf("healed by a watch the kernel refused: %+v", said)
	}
}
