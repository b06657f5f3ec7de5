package agent_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/benchstat"
	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// mirrorFiles is the size of the benchmarks' mirrored tree:
// CORTEX_SYNC_BENCH_FILES (default 1,000; 11,478 is GOROOT/src's size).
func mirrorFiles(b *testing.B) int {
	if n, err := strconv.Atoi(os.Getenv("CORTEX_SYNC_BENCH_FILES")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// mirrorTree is n small files in directories of 50.
func mirrorTree(n int) map[string]*string {
	files := map[string]*string{}
	for i := range n {
		files[fmt.Sprintf("kb/d%03d/f%05d.md", i/50, i)] = gittest.S(fmt.Sprintf("file %d\n", i))
	}
	files["kb.yaml"] = gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n")
	files[".cortexignore"] = gittest.S("kb/\n")
	return files
}

// latencies reports the median, the 95th and 99th percentiles, and the CPU time
// (user and system) the process spent an operation since cpu0: a shared
// machine's load stretches the first two, hardly the third.
func latencies(b *testing.B, took []time.Duration, cpu0 time.Duration) {
	cpu := benchstat.CPU(false) - cpu0
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(took[len(took)*95/100].Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(took)), "cpu-ms/op")
}

// waitFile polls until p holds want, at 1 ms.
func waitFile(b *testing.B, p, want string, start time.Time) {
	for {
		if got, _ := os.ReadFile(p); string(got) == want {
			return
		}
		if time.Since(start) > 20*time.Second {
			b.Fatalf("%s not %q 20s later", p, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkHealInMirror: a hand edit of one file of a mirrored tree of
// CORTEX_SYNC_BENCH_FILES files, healed by the agent's watch; the time
// from the edit to the file holding its content again. A watch event
// narrows the converge to the file it names.
func BenchmarkHealInMirror(b *testing.B) {
	repo := gittest.NewRepo(b)
	repo.Commit("tree", mirrorTree(mirrorFiles(b)))
	root := b.TempDir()
	a := agent.New(agent.Options{
		Engine:   reconcile.Config{Root: root, StateDir: b.TempDir(), Concurrency: 2, LockTimeout: 10 * time.Second},
		Source:   &source.Git{URL: "file://" + repo.Dir, Branch: "main", Path: ".", Cache: state.At(b.TempDir()), Timeout: 20 * time.Second},
		Interval: time.Hour, DriftInterval: time.Hour, SelfHeal: true, FightThreshold: 1 << 30,
	})
	runBench(b, a)
	target := filepath.Join(root, "srv/kb/d000/f00007.md")
	var took []time.Duration
	cpu0 := benchstat.CPU(false)
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		os.WriteFile(target, []byte(fmt.Sprintf("edit %d\n", i)), 0o644)
		waitFile(b, target, "file 7\n", start)
		took = append(took, time.Since(start))
	}
	latencies(b, took, cpu0)
}

// BenchmarkWebhookToMirror: a commit changing one file of a mirrored tree
// of CORTEX_SYNC_BENCH_FILES files, pushed to a git daemon, then a signed
// webhook: the time from the webhook to the file on disk. The commit's
// tree IDs name the one entry that changed.
func BenchmarkWebhookToMirror(b *testing.B) {
	repo := gittest.NewRepo(b)
	repo.Commit("tree", mirrorTree(mirrorFiles(b)))
	url, stop := repo.Daemon(b)
	b.Cleanup(stop)
	secret := filepath.Join(b.TempDir(), "secret")
	writeFile(b, secret, "s3cret")
	root, stateDir := b.TempDir(), b.TempDir()
	a := agent.New(agent.Options{
		Engine:   reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second},
		Source:   &source.Git{URL: url, Branch: "main", Path: ".", Cache: state.At(filepath.Join(stateDir, "cache")), Timeout: 20 * time.Second},
		Interval: time.Hour, DriftInterval: time.Hour, SelfHeal: true,
	})
	hook, err := agent.NewWebhook(agent.WebhookOptions{SecretFile: secret, Ref: "refs/heads/main", MinInterval: time.Millisecond,
		Trigger: func(agent.Push) { a.Reconcile(agent.TriggerWebhook) }})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(hook)
	b.Cleanup(srv.Close)
	runBench(b, a)
	body := []byte(`{"ref": "refs/heads/main"}`)
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write(body)
	sig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	target := filepath.Join(root, "srv/kb/d001/f00051.md")
	var took []time.Duration
	var commits time.Duration // the commits' CPU is not the agent's
	cpu0 := benchstat.CPU(false)
	for i := 1; b.Loop(); i++ {
		b.StopTimer()
		c0 := benchstat.CPU(false)
		want := fmt.Sprintf("commit %d\n", i)
		repo.Commit(want, map[string]*string{"kb/d001/f00051.md": gittest.S(want)})
		commits += benchstat.CPU(false) - c0
		b.StartTimer()
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-Hub-Signature-256", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		waitFile(b, target, want, start)
		took = append(took, time.Since(start))
	}
	latencies(b, took, cpu0+commits)
}

// runBench runs a until the benchmark ends and waits for it to be ready.
func runBench(b *testing.B, a *agent.Agent) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if ok, _ := a.Ready(); ok {
			return
		}
		if time.Now().After(deadline) {
			_, why := a.Ready()
			b.Fatalf("agent not ready: %s", why)
		}
	}
}
