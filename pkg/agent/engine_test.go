package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/syncbuf"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Where the agent and sync kept two copies of a policy, they disagreed;
// now both ask the engine's Gate. Each test here failed on the agent's own
// copy.

// runAgent runs an agent with opts (a directory source at repo) until the
// test ends.
func runAgent(t *testing.T, repo string, opts agent.Options) *agent.Agent {
	t.Helper()
	opts.Source = &source.Dir{Dir: repo, Path: "."}
	return runOptions(t, opts)
}

// runOptions runs an agent on opts's source until the test ends, polling
// and scanning hourly (what it does comes from watches and the test).
func runOptions(tb testing.TB, opts agent.Options) *agent.Agent {
	tb.Helper()
	opts.Interval, opts.DriftInterval, opts.SelfHeal = time.Hour, time.Hour, true
	a := agent.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	})
	return a
}

func heldAs(a *agent.Agent, id, verdict string) *reconcile.Held {
	r := a.Status(context.Background()).Agent
	if r == nil {
		return nil // not started yet
	}
	for _, h := range r.Held {
		if h.ID == id && h.Verdict == verdict {
			return &h
		}
	}
	return nil
}

// TestAgentRefusesPruneWithNoRecordedSource: a snapshot with an inventory
// and no recorded source is no proof of the same source. sync refused to
// prune from it; the agent pruned.
func TestAgentRefusesPruneWithNoRecordedSource(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(repo, "keep.yaml"), "apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: keep}\nspec: {path: /etc/keep, content: x}\n")
	writeFile(t, filepath.Join(repo, "old.yaml"), "apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: old}\nspec: {path: /etc/old, content: x}\n")
	syncOnce(t, repo, root, stateDir)
	d := state.At(stateDir)
	snap, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	snap.Source = state.Source{} // as a hand-written or older snapshot
	if err := d.Save(snap); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(repo, "old.yaml"))

	a := runAgent(t, repo, agent.Options{Prune: true,
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	waitFor(t, 30*time.Second, "the prune of File/old refused", func() bool {
		h := heldAs(a, "File/old", "refused")
		return h != nil && h.Reason != ""
	})
	if _, err := os.Stat(filepath.Join(root, "etc/old")); err != nil {
		t.Fatalf("File/old was pruned from a snapshot that records no source: %v", err)
	}
	st := a.Status(context.Background())
	if st.Agent.PruneHold == "" || st.Conditions.PruneHeld == "" {
		t.Error("status does not say why prune is held")
	}
	if st.Conditions.Ready || !strings.HasPrefix(st.Conditions.Message, "prune held: refusing to prune") {
		t.Errorf("conditions %+v: not ready, and the message names the hold", st.Conditions)
	}
}

// TestAgentHoldsPruneWhenEveryManifestIsDeleted: a repository emptied of
// manifests (a wrong path, a bad merge) deletes nothing; the hold is a
// named condition with its reason, and the agent stays ready: the host is
// healthy, and the hold waits for a person (--allow-empty, or the
// manifests back).
func TestAgentHoldsPruneWhenEveryManifestIsDeleted(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	for _, name := range []string{"a", "b"} {
		writeFile(t, filepath.Join(repo, name+".yaml"), "apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: "+name+"}\nspec: {path: /etc/"+name+", content: x}\n")
	}
	a := runAgent(t, repo, agent.Options{Prune: true,
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	waitFor(t, 30*time.Second, "both files applied", func() bool {
		_, errA := os.Stat(filepath.Join(root, "etc/a"))
		_, errB := os.Stat(filepath.Join(root, "etc/b"))
		return errA == nil && errB == nil
	})
	os.Remove(filepath.Join(repo, "a.yaml"))
	os.Remove(filepath.Join(repo, "b.yaml"))
	a.Reconcile(agent.TriggerManual)
	var st *agent.Status
	waitFor(t, 30*time.Second, "the prune hold reported", func() bool {
		st = a.Status(context.Background())
		return st.Conditions.PruneHeld != ""
	})
	for _, name := range []string{"a", "b"} {
		if _, err := os.Stat(filepath.Join(root, "etc", name)); err != nil {
			t.Errorf("File/%s was pruned though the desired set is empty: %v", name, err)
		}
	}
	if !strings.Contains(st.Conditions.PruneHeld, "the desired set is empty") || !strings.Contains(st.Conditions.PruneHeld, "--allow-empty") {
		t.Errorf("pruneHeld %q: say the set is empty and what to do", st.Conditions.PruneHeld)
	}
	if st.Conditions.Ready || st.Conditions.Message != "prune held: "+st.Conditions.PruneHeld {
		t.Errorf("conditions %+v: not converged, and the message names the hold", st.Conditions)
	}
	if ok, why := a.Ready(); !ok {
		t.Errorf("/readyz would say 503 (%s): a prune hold leaves the host healthy", why)
	}
}

// TestAgentBlocksAfterWaitTimeout: a dependent of a Process that never
// gets ready is Blocked after the wait timeout, as under sync; the agent
// waited for it forever.
func TestAgentBlocksAfterWaitTimeout(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(repo, "m.yaml"), `apiVersion: cortex-sync/v1alpha1
kind: Process
metadata: {name: never}
spec:
  command: [sleep, "1000"]
  stopTimeout: 1s
  readinessProbe:
    exec: {command: ["false"]}
    period: 100ms
---
apiVersion: cortex-sync/v1alpha1
kind: File
metadata: {name: after}
spec: {path: /etc/after, content: x, dependsOn: [Process/never]}
`)
	t.Cleanup(func() { stopAll(t, repo, root, stateDir) })
	a := runAgent(t, repo, agent.Options{WaitTimeout: time.Second, RetryBase: time.Hour,
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	waitFor(t, 30*time.Second, "File/after blocked", func() bool {
		h := heldAs(a, "File/after", "blocked")
		return h != nil && regexp.MustCompile(`Process/never is Progressing after 1s`).MatchString(h.Reason)
	})
	if _, err := os.Stat(filepath.Join(root, "etc/after")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("File/after applied before its dependency was ready: %v", err)
	}
	snap, err := state.At(stateDir).Load()
	if err != nil {
		t.Fatal(err)
	}
	if f := snap.LastAttempt.FailureOf("File/after"); f == nil || f.BlockedBy != "Process/never" {
		t.Errorf("the attempt does not list File/after as blocked by Process/never: %+v", snap.LastAttempt)
	}
}

// TestAgentPrunesInsideFirst: on a snapshot written before dependencies
// were recorded, what lies inside a Directory is pruned before it, as sync
// does; the agent could prune the Directory first.
func TestAgentPrunesInsideFirst(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(repo, "keep.yaml"), "apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: keep}\nspec: {path: /etc/keep, content: x}\n")
	writeFile(t, filepath.Join(repo, "kb.yaml"), `apiVersion: cortex-sync/v1alpha1
kind: Directory
metadata: {name: kb}
spec: {path: /srv/kb}
---
apiVersion: cortex-sync/v1alpha1
kind: File
metadata: {name: note}
spec: {path: /srv/kb/note, content: x}
`)
	syncOnce(t, repo, root, stateDir)
	d := state.At(stateDir)
	snap, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Inventory {
		e.DependsOn = nil // as an older cortex-sync recorded them
	}
	if err := d.Save(snap); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(repo, "kb.yaml"))

	logs := &syncbuf.Buffer{}
	runAgent(t, repo, agent.Options{Prune: true, Log: slog.New(slog.NewTextHandler(logs, nil)),
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	deleted := regexp.MustCompile(`msg=applied resource=(\S+) .*action=delete`)
	waitFor(t, 30*time.Second, "both pruned", func() bool { return len(deleted.FindAllString(logs.String(), -1)) == 2 })
	order := deleted.FindAllStringSubmatch(logs.String(), -1)
	if order[0][1] != "File/note" || order[1][1] != "Directory/kb" {
		t.Fatalf("pruned %s, then %s; the File inside the Directory goes first", order[0][1], order[1][1])
	}
	if _, err := os.Stat(filepath.Join(root, "srv/kb")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/srv/kb left: %v", err)
	}
}

// TestAgentKeepsADamagedSnapshotAside: a state.json damaged under a
// running agent is kept aside, said once at ERROR, and only then replaced
// by the agent's snapshot; it was overwritten within seconds, the
// evidence gone.
func TestAgentKeepsADamagedSnapshotAside(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(repo, "a.yaml"), "apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: a}\nspec: {path: /etc/a, content: x}\n")
	logs := &syncbuf.Buffer{}
	a := runAgent(t, repo, agent.Options{Log: slog.New(slog.NewTextHandler(logs, nil)),
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	waitFor(t, 30*time.Second, "File/a recorded", func() bool {
		snap, err := state.At(stateDir).Load()
		return err == nil && snap.Find("File/a") != nil
	})
	garbage := []byte("{\"version\": 2, garbage")
	lock, err := state.At(stateDir).Lock(context.Background(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(stateDir, "state.json")
	if err := os.WriteFile(p+".new", garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".new", p); err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	writeFile(t, filepath.Join(root, "etc/a"), "edited") // something to do
	a.Reconcile(agent.TriggerManual)
	var aside []string
	waitFor(t, 30*time.Second, "state.json kept aside and written anew", func() bool {
		aside, _ = filepath.Glob(p + ".damaged-*")
		_, err := os.Stat(p) // a missing one loads as a new, empty snapshot
		if len(aside) != 1 || err != nil {
			return false
		}
		_, err = state.At(stateDir).Load()
		return err == nil
	})
	if b, _ := os.ReadFile(aside[0]); !bytes.Equal(b, garbage) {
		t.Errorf("%s holds %q, not the damaged snapshot", aside[0], b)
	}
	if n := strings.Count(logs.String(), "level=ERROR msg=\"state.json was damaged"); n != 1 {
		t.Errorf("said %d times at ERROR:\n%s", n, logs.String())
	}
	snap, _ := state.At(stateDir).Load()
	if snap.Find("File/a") == nil {
		t.Error("the agent's snapshot, written in place of the damaged one, forgot File/a")
	}
}

// TestAgentConvergesOnceTheFightEnds: something rewrites managed files
// over and over until they are fighting; once it stops, the host is put
// right within seconds, the fight still reported. Before, a fighting
// resource's corrections backed off from 30 s up to minutes.
func TestAgentConvergesOnceTheFightEnds(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	const n = 20
	var m strings.Builder
	for i := range n {
		fmt.Fprintf(&m, "---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: f%d}\nspec: {path: /etc/fight/f%d, content: \"desired\\n\"}\n", i, i)
	}
	writeFile(t, filepath.Join(repo, "m.yaml"), m.String())
	a := runAgent(t, repo, agent.Options{FightThreshold: 2, FightSettle: 500 * time.Millisecond,
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	path := func(i int) string { return filepath.Join(root, "etc/fight", fmt.Sprintf("f%d", i)) }
	waitFor(t, 30*time.Second, "the files written", func() bool {
		_, err := os.Stat(path(n - 1))
		return err == nil
	})
	// The attack: every file rewritten until each is fighting.
	waitFor(t, 60*time.Second, "every file fighting", func() bool {
		for i := range n {
			os.WriteFile(path(i), []byte("attacker\n"), 0o644)
		}
		time.Sleep(20 * time.Millisecond)
		return len(a.Status(context.Background()).Fighting) == n
	})
	// It stops: put right within seconds.
	waitFor(t, 10*time.Second, "every file healed", func() bool {
		for i := range n {
			if b, _ := os.ReadFile(path(i)); string(b) != "desired\n" {
				return false
			}
		}
		return true
	})
	if got := len(a.Status(context.Background()).Fighting); got != n {
		t.Errorf("%d fighting once healed, want the fight still reported for all %d", got, n)
	}
}

// TestAgentReportsWhatItKeeps: without prune, what left Git stays, and the
// report says kept (the policy's choice), not refused (a revision's).
func TestAgentReportsWhatItKeeps(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	for _, name := range []string{"a", "b"} {
		writeFile(t, filepath.Join(repo, name+".yaml"), "apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: "+name+"}\nspec: {path: /etc/"+name+", content: x}\n")
	}
	a := runAgent(t, repo, agent.Options{
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	waitFor(t, 30*time.Second, "File/b applied", func() bool {
		_, err := os.Stat(filepath.Join(root, "etc/b"))
		return err == nil
	})
	os.Remove(filepath.Join(repo, "b.yaml"))
	a.Reconcile(agent.TriggerManual)
	waitFor(t, 30*time.Second, "File/b reported kept", func() bool {
		h := heldAs(a, "File/b", "kept")
		return h != nil && strings.Contains(h.Reason, "kept without --prune")
	})
	if _, err := os.Stat(filepath.Join(root, "etc/b")); err != nil {
		t.Fatalf("File/b was pruned without --prune: %v", err)
	}
	if st := a.Status(context.Background()); st.Status.Sync != "OutOfSync" {
		t.Errorf("status says %s with File/b kept: the host does not match Git", st.Status.Sync)
	}
}

// TestAgentDoesNotUndoANewerSync: a sync by hand applies a newer state of
// the source than the agent last fetched; the agent, reading the snapshot
// that sync saved, fetches again before it applies anything, rather than
// putting its older desired state back (lock-contention.txtar caught it
// rerunning an older Command's spec under -race).
func TestAgentDoesNotUndoANewerSync(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	manifest := func(content string) {
		writeFile(t, filepath.Join(repo, "f.yaml"), "apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: f}\nspec: {path: /etc/f, content: "+content+"}\n")
	}
	manifest("v1")
	var logb syncbuf.Buffer
	a := runAgent(t, repo, agent.Options{Log: slog.New(slog.NewTextHandler(&logb, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	defer func() {
		if t.Failed() {
			t.Log(logb.String())
		}
	}()
	p := filepath.Join(root, "etc/f")
	waitFor(t, 30*time.Second, "v1 applied and the agent ready", func() bool {
		b, _ := os.ReadFile(p)
		ok, _ := a.Ready()
		return string(b) == "v1" && ok
	})
	manifest("v2")
	syncOnce(t, repo, root, stateDir) // the agent's interval is an hour: it did not fetch v2
	if err := os.WriteFile(p, []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the hand edit healed", func() bool {
		b, _ := os.ReadFile(p)
		return string(b) != "edited"
	})
	if b, _ := os.ReadFile(p); string(b) != "v2" {
		t.Fatalf("the agent put %q back over the sync's v2", b)
	}
}
