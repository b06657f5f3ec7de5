package agent_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/benchstat"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/source"
)

// BenchmarkConvergeAfterChurn: 1,000 Files and a 1,000-file mirror, every
// path rewritten by two attackers for CORTEX_SYNC_CHURN (default 20s) until
// the agent reports the fight; then the attack stops. converged-ms is the
// time from the last hostile write to the host matching Git again (target:
// ≤ 5 s, with the default --fight-settle of 2 s); the fight stays reported.
func BenchmarkConvergeAfterChurn(b *testing.B) {
	churn := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("CORTEX_SYNC_CHURN")); err == nil {
		churn = d
	}
	const n = 1000
	for b.Loop() {
		repo, root, stateDir := b.TempDir(), b.TempDir(), b.TempDir()
		var m strings.Builder
		for i := range n {
			fmt.Fprintf(&m, "---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: f%d}\nspec: {path: /etc/fight/f%d, content: \"desired %d\\n\"}\n", i, i, i)
		}
		writeFile(b, filepath.Join(repo, "files.yaml"), m.String())
		writeFile(b, filepath.Join(repo, "kb.yaml"), "apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n")
		writeFile(b, filepath.Join(repo, ".cortexignore"), "kb/\n")
		paths, want := make([]string, 0, 2*n), make([]string, 0, 2*n)
		for i := range n {
			paths, want = append(paths, filepath.Join(root, "etc/fight", fmt.Sprintf("f%d", i))), append(want, fmt.Sprintf("desired %d\n", i))
			rel := fmt.Sprintf("d%02d/f%04d.md", i/50, i)
			writeFile(b, filepath.Join(repo, "kb", rel), fmt.Sprintf("kb %d\n", i))
			paths, want = append(paths, filepath.Join(root, "srv/kb", rel)), append(want, fmt.Sprintf("kb %d\n", i))
		}
		ctx, cancel := context.WithCancel(context.Background())
		a := agent.New(agent.Options{Interval: time.Hour, DriftInterval: time.Minute, SelfHeal: true,
			Source: &source.Dir{Dir: repo, Path: "."},
			Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		converged := func() bool {
			for i, p := range paths {
				if got, _ := os.ReadFile(p); string(got) != want[i] {
					return false
				}
			}
			return true
		}
		waitUntil(b, time.Minute, "the first sync", converged)

		var writes atomic.Int64
		var last atomic.Int64 // unix nanoseconds of the last hostile write
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 1))
				for {
					select {
					case <-stop:
						return
					default:
					}
					p := paths[r.IntN(len(paths))]
					os.WriteFile(p, []byte("attacker\n"), 0o644)
					last.Store(time.Now().UnixNano())
					writes.Add(1)
					time.Sleep(50 * time.Microsecond)
				}
			})
		}
		cpu0 := benchstat.CPU(false)
		if churn == 0 { // no fight: every mirrored file spoilt once
			for i := 1; i < len(paths); i += 2 {
				os.WriteFile(paths[i], []byte("attacker\n"), 0o644)
			}
			last.Store(time.Now().UnixNano())
		}
		time.Sleep(churn)
		fighting := len(a.Status(context.Background()).Fighting)
		close(stop)
		wg.Wait()
		end := time.Unix(0, last.Load())
		var filesAt time.Duration
		waitUntil(b, 5*time.Minute, "converged after the churn", func() bool {
			ok := true
			for i := 0; i < len(paths); i += 2 { // the Files
				if got, _ := os.ReadFile(paths[i]); string(got) != want[i] {
					ok = false
					break
				}
			}
			if os.Getenv("CORTEX_SYNC_CHURN_TRACE") != "" {
				wrong := 0
				for i := 1; i < len(paths); i += 2 {
					if got, _ := os.ReadFile(paths[i]); string(got) != want[i] {
						wrong++
					}
				}
				b.Logf("%6d ms: %d mirrored files wrong", time.Since(end).Milliseconds(), wrong)
			}
			if ok && filesAt == 0 {
				filesAt = time.Since(end)
			}
			return ok && converged()
		})
		took := time.Since(end)
		b.ReportMetric(float64(filesAt.Milliseconds()), "files-converged-ms")
		after := len(a.Status(context.Background()).Fighting)
		b.ReportMetric(float64(took.Milliseconds()), "converged-ms")
		b.ReportMetric(float64(writes.Load()), "hostile-writes")
		b.ReportMetric(float64(fighting), "fighting-at-stop")
		b.ReportMetric(float64(after), "fighting-reported-after")
		b.ReportMetric(float64((benchstat.CPU(false) - cpu0).Milliseconds()), "cpu-ms")
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

// waitUntil polls cond every 50 ms until it holds or d passes.
func waitUntil(b *testing.B, d time.Duration, what string, cond func() bool) {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("no %s within %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
