package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// parityHost is one host of the parity test: a root and a state dir, fed
// from a repository directory of its own (the two hosts' repositories
// are written alike).
type parityHost struct {
	repo, root, state string
}

func newParityHost(t *testing.T) parityHost {
	return parityHost{repo: t.TempDir(), root: t.TempDir(), state: t.TempDir()}
}

// syncHost runs one sync of h with policy p, in-process as the CLI does,
// and returns its report and refusal.
func syncHost(t *testing.T, h parityHost, p reconcile.Policy) (*apply.Report, error) {
	t.Helper()
	ctx := context.Background()
	d, err := reconcile.Load(ctx, &source.Dir{Dir: h.repo, Path: "."}, resource.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, err := reconcile.Open(ctx, reconcile.Config{Root: h.root, StateDir: h.state, Concurrency: 2, LockTimeout: 10 * time.Second}, d, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Policy = p
	return s.Sync(ctx, s.Plan(ctx), state.Retention{})
}

// inventory is a saved snapshot's inventory in words: each ID, whether
// cortex-sync created it, and whether its last apply failed.
func inventory(t *testing.T, h parityHost) []string {
	t.Helper()
	snap, err := state.At(h.state).Load()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range snap.Inventory {
		out = append(out, fmt.Sprintf("%s created=%v failed=%v", e.ID, e.Created, e.Result != nil && e.Result.Error != ""))
	}
	slices.Sort(out)
	return out
}

// failures is the saved snapshot's last attempt in words.
func failures(t *testing.T, h parityHost) []string {
	t.Helper()
	snap, err := state.At(h.state).Load()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if a := snap.LastAttempt; a != nil {
		for _, f := range a.Failed {
			out = append(out, f.ID+" blockedBy="+f.BlockedBy)
		}
	}
	slices.Sort(out)
	return out
}

// writeBoth writes the same manifest into both repositories (content ""
// removes it).
func writeBoth(t *testing.T, a, b parityHost, name, content string) {
	for _, h := range []parityHost{a, b} {
		p := filepath.Join(h.repo, name)
		if content == "" {
			os.Remove(p)
			continue
		}
		writeFile(t, p, content)
	}
}

func file(name, path, extra string) string {
	return fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: %s}\nspec: {path: %s, content: \"%s\\n\"%s}\n", name, path, name, extra)
}

// TestParity runs one story through sync and through the agent, on two
// hosts: after each step both end in the same inventory and the same
// attempt, and refuse the same things.
func TestParity(t *testing.T) {
	bySync, byAgent := newParityHost(t), newParityHost(t)
	policy := reconcile.Policy{Prune: true, WaitTimeout: time.Second}
	ctx := context.Background()

	// The agent's host starts on the same first revision as the other.
	writeBoth(t, bySync, byAgent, "a.yaml", file("a", "/etc/a", ""))
	writeBoth(t, bySync, byAgent, "kb.yaml", "apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb}\n"+"---\n"+file("note", "/srv/kb/note", ""))
	logs := &syncedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	a := runAgent(t, byAgent.repo, agent.Options{Log: slog.New(slog.NewTextHandler(logs, nil)), Prune: true, WaitTimeout: time.Second, RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Engine: reconcile.Config{Root: byAgent.root, StateDir: byAgent.state, Concurrency: 2, LockTimeout: 10 * time.Second}})

	// same waits for the agent's saved state to match what sync saved.
	same := func(step string) {
		t.Helper()
		want, wantF := inventory(t, bySync), failures(t, bySync)
		var got, gotF []string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			a.Reconcile(agent.TriggerManual)
			got, gotF = inventory(t, byAgent), failures(t, byAgent)
			if slices.Equal(got, want) && slices.Equal(gotF, wantF) {
				return
			}
			if time.Now().After(deadline) {
				break
			}
		}
		t.Fatalf("%s: the agent's inventory\n  %s\nattempt %v\nsync's\n  %s\nattempt %v", step,
			strings.Join(got, "\n  "), gotF, strings.Join(want, "\n  "), wantF)
	}
	step := func(name string) {
		t.Helper()
		if _, err := syncHost(t, bySync, policy); err != nil {
			t.Fatalf("%s: sync: %v", name, err)
		}
		same(name)
	}

	step("first apply")

	// A hand edit on both hosts: healed, recorded the same.
	for _, h := range []parityHost{bySync, byAgent} {
		writeFile(t, filepath.Join(h.root, "etc/a"), "edited\n")
	}
	step("hand edit")

	// A failing resource and its dependent: failed and blocked alike.
	for _, h := range []parityHost{bySync, byAgent} {
		writeFile(t, filepath.Join(h.root, "blocker"), "a file where a directory should be")
	}
	writeBoth(t, bySync, byAgent, "broken.yaml", file("broken", "/blocker/x", "")+"---\n"+file("after", "/etc/after", ", dependsOn: [File/broken]"))
	if rep, err := syncHost(t, bySync, policy); err != nil || !rep.Failed() {
		t.Fatalf("failing dependency: sync %v, failed %v", err, rep.Failed())
	}
	same("failing dependency")
	writeBoth(t, bySync, byAgent, "broken.yaml", "")

	// Removed from Git: pruned alike, the File inside the Directory first.
	writeBoth(t, bySync, byAgent, "kb.yaml", "")
	step("removal from Git")

	// A snapshot put back from before: prune is refused alike.
	writeBoth(t, bySync, byAgent, "gone.yaml", file("gone", "/etc/gone", ""))
	step("before the rollback")
	saved := map[string][]byte{}
	for _, h := range []parityHost{bySync, byAgent} {
		b, err := os.ReadFile(filepath.Join(h.state, "state.json"))
		if err != nil {
			t.Fatal(err)
		}
		saved[h.state] = b
	}
	writeBoth(t, bySync, byAgent, "other.yaml", file("other", "/etc/other", ""))
	step("a later revision")
	for _, h := range []parityHost{bySync, byAgent} {
		// Put back as a careful hand does: under the state lock, whole, by
		// a rename.
		lock, err := state.At(h.state).Lock(ctx, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(h.state, "state.json")
		if err := os.WriteFile(p+".restore", saved[h.state], 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".restore", p); err != nil {
			t.Fatal(err)
		}
		lock.Unlock()
	}
	writeBoth(t, bySync, byAgent, "gone.yaml", "")
	if _, err := syncHost(t, bySync, policy); !errors.Is(err, state.ErrRollback) {
		t.Fatalf("sync on a rolled-back snapshot: %v, want a refusal", err)
	}
	a.Reconcile(agent.TriggerManual)
	t.Cleanup(func() {
		if t.Failed() {
			r := a.Status(context.Background()).Agent
			t.Logf("agent report: %+v", r)
			_, err := os.Stat(filepath.Join(byAgent.root, "etc/gone"))
			t.Logf("etc/gone: %v", err)
		}
	})
	waitFor(t, 20*time.Second, "the agent refusing the prune of File/gone", func() bool {
		h := heldAs(a, "File/gone", "refused")
		return h != nil && strings.Contains(h.Reason, "rolled back")
	})
	if _, err := os.Stat(filepath.Join(byAgent.root, "etc/gone")); err != nil {
		t.Fatalf("the agent pruned from a rolled-back snapshot: %v", err)
	}
	_ = ctx
}
