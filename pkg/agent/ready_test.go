package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/source"
)

// TestReadyWhileBusy: the first reconcile is done once every key of the
// first revision was reconciled, even while the queue is never idle.
// Readiness that waited for an idle queue did not come within 10s under
// load in CI, while a process the agent restarted kept coming back.
func TestReadyWhileBusy(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	manifests := `apiVersion: cortex-sync/v1alpha1
kind: File
metadata: {name: motd}
spec: {path: /etc/motd, content: "hello\n"}
---
apiVersion: cortex-sync/v1alpha1
kind: Command
metadata: {name: fails}
spec: {command: [sh, -c, "exit 3"]}
`
	if err := os.WriteFile(filepath.Join(repo, "m.yaml"), []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	a := New(Options{
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 1, LockTimeout: 30 * time.Second},
		Source: &source.Dir{Dir: repo, Path: "."}, Interval: time.Hour, DriftInterval: time.Hour, SelfHeal: true,
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
	})
	// A worker busy without end with a key outside the first revision (a
	// command retried, a host that keeps drifting, a slow mirror of a
	// later revision): the queue is never idle.
	a.keys.inflight.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		a.keys.inflight.Add(-1)
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, why := a.Ready()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 30s with a busy queue: %s", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/motd")); err != nil || string(b) != "hello\n" {
		t.Errorf("ready before File/motd was applied: %q, %v", b, err)
	}
	// Ready means watched: the directory the first pass made is.
	a.keys.watch.mu.Lock()
	_, watched := a.keys.watch.dirs[filepath.Join(root, "etc")]
	a.keys.watch.mu.Unlock()
	if !watched {
		t.Errorf("ready before %s/etc, made by the first pass, was watched", root)
	}
}
