package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

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
