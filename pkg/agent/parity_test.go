package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/internal/syncbuf"
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
	return syncFrom(t, h, &source.Dir{Dir: h.repo, Path: "."}, p)
}

// syncFrom runs one sync of h from src with policy p.
func syncFrom(t *testing.T, h parityHost, src source.Source, p reconcile.Policy) (*apply.Report, error) {
	t.Helper()
	ctx := context.Background()
	d, err := reconcile.Load(ctx, src, resource.Options{}, nil)
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
	logs := &syncbuf.Buffer{}
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

// TestParitySourceSwitch: the source-switch story through sync and
// through the agent, on two hosts fed from one repository: first applied
// from a --dir checkout, then from Git at the commit of exactly that
// content, then from the checkout again with a resource removed. Both end
// in the same inventory, the same recorded source, the same applies (none
// for the switch to the same content), and refuse the same prune.
func TestParitySourceSwitch(t *testing.T) {
	bySync, byAgent := newParityHost(t), newParityHost(t)
	policy := reconcile.Policy{Prune: true, WaitTimeout: time.Second}
	repo := gittest.NewRepo(t)
	repo.Commit("first", map[string]*string{
		"a.yaml":    gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: a}\nspec: {path: /etc/a, source: a.conf}\n"),
		"a.conf":    gittest.S("a\n"),
		"kb.yaml":   gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n"),
		"kb/one":    gittest.S("one\n"),
		"kb/d/two":  gittest.S("two\n"),
		"gone.yaml": gittest.S(file("gone", "/etc/gone", "")),
	})
	url, stop := repo.Daemon(t)
	t.Cleanup(stop)
	checkout := func() source.Source { return &source.Dir{Dir: repo.Dir, Path: "."} }
	git := func(h parityHost) source.Source {
		return &source.Git{URL: url, Branch: "main", Path: ".", Cache: state.At(filepath.Join(h.state, "cache")), Timeout: 10 * time.Second}
	}

	// sync runs one sync of h from src: the IDs it applied, and its refusal.
	sync := func(h parityHost, src source.Source) ([]string, error) {
		t.Helper()
		rep, err := syncFrom(t, h, src, policy)
		var ids []string
		if rep != nil {
			for _, id := range rep.Applied() {
				ids = append(ids, string(id))
			}
		}
		slices.Sort(ids)
		return ids, err
	}
	// run runs an agent on h from src until the step ends: it returns the
	// agent, and a stop that returns the IDs it applied.
	run := func(h parityHost, src source.Source) (*agent.Agent, func() []string) {
		t.Helper()
		logs := &syncbuf.Buffer{}
		a := agent.New(agent.Options{Source: src, Log: slog.New(slog.NewTextHandler(logs, nil)),
			Interval: time.Hour, DriftInterval: time.Hour, SelfHeal: true, Prune: true, WaitTimeout: time.Second,
			RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
			Engine: reconcile.Config{Root: h.root, StateDir: h.state, Concurrency: 2, LockTimeout: 10 * time.Second}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		return a, func() []string {
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, m := range regexp.MustCompile(`msg=applied resource=(\S+)`).FindAllStringSubmatch(logs.String(), -1) {
				if !slices.Contains(ids, m[1]) {
					ids = append(ids, m[1])
				}
			}
			slices.Sort(ids)
			return ids
		}
	}
	// same checks that both hosts saved the same inventory, attempt and
	// source, once the agent is ready.
	same := func(step string, a *agent.Agent) {
		t.Helper()
		waitFor(t, 30*time.Second, step+": the agent ready", func() bool { ok, _ := a.Ready(); return ok })
		for _, what := range []func(parityHost) []string{
			func(h parityHost) []string { return inventory(t, h) },
			func(h parityHost) []string { return failures(t, h) },
			func(h parityHost) []string { return []string{recorded(t, h)} },
		} {
			if got, want := what(byAgent), what(bySync); !slices.Equal(got, want) {
				t.Fatalf("%s: the agent saved\n  %s\nsync saved\n  %s", step, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		}
	}

	// From the checkout: everything created alike.
	applied, err := sync(bySync, checkout())
	if err != nil {
		t.Fatal(err)
	}
	a, stopAgent := run(byAgent, checkout())
	same("first apply from the checkout", a)
	if got := stopAgent(); !slices.Equal(got, applied) {
		t.Fatalf("first apply: the agent applied %v, sync %v", got, applied)
	}

	// To Git at the commit of exactly that content: nothing to do on
	// either host, and the Git source recorded by both.
	if applied, err = sync(bySync, git(bySync)); err != nil || len(applied) > 0 {
		t.Fatalf("switch to Git: sync applied %v (%v), want nothing", applied, err)
	}
	a, stopAgent = run(byAgent, git(byAgent))
	same("switch to Git", a)
	if got := stopAgent(); len(got) > 0 {
		t.Fatalf("switch to Git: the agent applied %v, want nothing", got)
	}
	if r := recorded(t, bySync); !strings.HasPrefix(r, url+" path") {
		t.Fatalf("switch to Git: the snapshot records %q, want %s", r, url)
	}

	// Back to the checkout, with a resource removed there: prune across the
	// source change is refused alike, and nothing else moves.
	if err := os.Remove(filepath.Join(repo.Dir, "gone.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := sync(bySync, checkout()); !errors.Is(err, reconcile.ErrSourceChange) {
		t.Fatalf("back to the checkout with File/gone removed: sync %v, want a source-change refusal", err)
	}
	a, stopAgent = run(byAgent, checkout())
	waitFor(t, 30*time.Second, "the agent refusing the prune of File/gone", func() bool {
		h := heldAs(a, "File/gone", "refused")
		return h != nil && strings.Contains(h.Reason, "--allow-source-change")
	})
	same("back to the checkout", a)
	if got := stopAgent(); len(got) > 0 {
		t.Fatalf("back to the checkout: the agent applied %v, want nothing", got)
	}
	for _, h := range []parityHost{bySync, byAgent} {
		if _, err := os.Stat(filepath.Join(h.root, "etc/gone")); err != nil {
			t.Fatalf("File/gone pruned across the source change: %v", err)
		}
	}
}

// recorded is the source a host's saved snapshot records.
func recorded(t *testing.T, h parityHost) string {
	t.Helper()
	snap, err := state.At(h.state).Load()
	if err != nil {
		t.Fatal(err)
	}
	return snap.Source.URL + " path " + snap.Source.Path
}
