package reconcile_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// host is a repository, a root and a state dir in temp dirs, driven the
// way the CLI drives them.
type host struct {
	t                 *testing.T
	repo, root, stdir string
}

func newHost(t *testing.T) *host {
	return &host{t: t, repo: t.TempDir(), root: t.TempDir(), stdir: t.TempDir()}
}

func (h *host) write(dir, name, data string) {
	h.t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// manifest writes a File manifest into the repository.
func (h *host) file(name, path, content string, extra ...string) {
	spec := "{path: " + path + ", content: " + content
	for _, e := range extra {
		spec += ", " + e
	}
	h.write(h.repo, name+".yaml", "apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: "+name+"}\nspec: "+spec+"}\n")
}

// run plans and, unless planOnly, syncs with policy p through the engine,
// as the CLI does.
func (h *host) run(planOnly bool, p reconcile.Policy) (*diff.Plan, *apply.Report) {
	h.t.Helper()
	ctx := context.Background()
	src := &source.Dir{Dir: h.repo, Cache: state.At(filepath.Join(h.stdir, "cache"))}
	d, err := reconcile.Load(ctx, src, resource.Options{}, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	defer d.Close()
	s, err := reconcile.Open(ctx, reconcile.Config{Root: h.root, StateDir: h.stdir, Concurrency: 2, LockTimeout: time.Second}, d, !planOnly)
	if err != nil {
		h.t.Fatal(err)
	}
	defer s.Close()
	s.Policy = p
	plan := s.Plan(ctx)
	if planOnly {
		return plan, nil
	}
	rep, err := s.Sync(ctx, plan, state.Retention{})
	if err != nil {
		h.t.Fatal(err)
	}
	return plan, rep
}

func find(p *diff.Plan, id resource.ID) *diff.Change {
	for _, c := range p.Changes {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// TestThreeWay checks every way desired, last applied and live can relate.
func TestThreeWay(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(h *host) // from a host synced to File/a = "one"
		action     diff.Action
		reason     diff.Reason
		prune      bool
		pristine   bool // skip the initial sync
		wantBackup bool
	}{
		{name: "added in Git", pristine: true, action: diff.Create, reason: diff.AddedInGit},
		{name: "in sync", setup: func(h *host) {}, action: diff.NoOp},
		{name: "changed in Git", setup: func(h *host) { h.file("a", "/etc/a", "two") }, action: diff.Update, reason: diff.ChangedInGit},
		{name: "mode changed in Git", setup: func(h *host) { h.file("a", "/etc/a", "one", `mode: "0600"`) }, action: diff.Update, reason: diff.ChangedInGit},
		{name: "edited on the host", setup: func(h *host) { h.write(h.root, "etc/a", "hacked") }, action: diff.Update, reason: diff.Drifted, wantBackup: true},
		{name: "chmod on the host", setup: func(h *host) { os.Chmod(filepath.Join(h.root, "etc/a"), 0o600) }, action: diff.NoOp},
		{name: "deleted on the host", setup: func(h *host) { os.Remove(filepath.Join(h.root, "etc/a")) }, action: diff.Create, reason: diff.MissingOnHost},
		{name: "removed from Git", setup: func(h *host) { os.Remove(filepath.Join(h.repo, "a.yaml")) }, action: diff.Delete, reason: diff.RemovedFromGit, prune: true},
		{name: "removed from Git and the host", setup: func(h *host) {
			os.Remove(filepath.Join(h.repo, "a.yaml"))
			os.Remove(filepath.Join(h.root, "etc/a"))
		}, action: diff.Forget, reason: diff.RemovedFromGit},
		{name: "taken over, identical", pristine: true, setup: func(h *host) { h.write(h.root, "etc/a", "one") }, action: diff.NoOp},
		{name: "taken over, different", pristine: true, setup: func(h *host) { h.write(h.root, "etc/a", "theirs") }, action: diff.Update, reason: diff.AddedInGit, wantBackup: true},
		{name: "a directory in the way", setup: func(h *host) {
			os.Remove(filepath.Join(h.root, "etc/a"))
			h.write(h.root, "etc/a/inner", "x")
		}, action: diff.Update, reason: diff.Drifted, wantBackup: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t)
			h.file("a", "/etc/a", "one")
			if !tt.pristine {
				h.run(false, reconcile.Policy{})
			}
			if tt.setup != nil {
				tt.setup(h)
			}
			plan, _ := h.run(true, reconcile.Policy{})
			c := find(plan, "File/a")
			if c == nil || c.Err != nil {
				t.Fatalf("File/a: %+v", c)
			}
			if c.Action != tt.action || c.Reason != tt.reason || c.Prune != tt.prune {
				t.Fatalf("planned %s (%s, prune %v), want %s (%s, prune %v)", c.Action, c.Reason, c.Prune, tt.action, tt.reason, tt.prune)
			}
			// Applying converges: the next plan has nothing left to do.
			_, rep := h.run(false, reconcile.Policy{Prune: true, AllowEmpty: true})
			if rep.Failed() {
				t.Fatalf("apply failed: %+v", rep.Results[0])
			}
			after, _ := h.run(true, reconcile.Policy{})
			if after.HasChanges() {
				t.Fatalf("not converged: %+v", after.Changes[0])
			}
			backups, _ := filepath.Glob(filepath.Join(h.stdir, "backups", "*", "etc", "a"))
			if got := len(backups) > 0; got != tt.wantBackup {
				t.Fatalf("backup made: %v, want %v", got, tt.wantBackup)
			}
		})
	}
}

func TestChmodOnHostIsDriftWhenModeManaged(t *testing.T) {
	h := newHost(t)
	h.file("a", "/etc/a", "one", `mode: "0640"`)
	h.run(false, reconcile.Policy{})
	os.Chmod(filepath.Join(h.root, "etc/a"), 0o666)
	plan, _ := h.run(true, reconcile.Policy{})
	c := find(plan, "File/a")
	if c.Action != diff.Update || c.Reason != diff.Drifted || len(c.Attrs) != 1 || c.Attrs[0].Before != "0666" {
		t.Fatalf("got %s %s %+v, want a mode drift 0666 → 0640", c.Action, c.Reason, c.Attrs)
	}
}

// TestFailureBlocksDependentsOnly: a resource that cannot apply blocks what
// depends on it, not its unrelated siblings, and all failures are reported.
func TestFailureBlocksDependentsOnly(t *testing.T) {
	h := newHost(t)
	h.write(h.root, "blocker", "a file where a directory should be")
	h.file("broken", "/blocker/x", "x")
	h.file("dependent", "/dependent", "y", "dependsOn: [File/broken]")
	h.file("transitive", "/transitive", "z", "dependsOn: [File/dependent]")
	h.file("sibling", "/sibling", "s")
	_, rep := h.run(false, reconcile.Policy{})
	outcomes := map[resource.ID]apply.Outcome{}
	for _, r := range rep.Results {
		outcomes[r.ID] = r.Outcome
	}
	want := map[resource.ID]apply.Outcome{
		"File/broken": apply.Failed, "File/dependent": apply.Blocked,
		"File/transitive": apply.Blocked, "File/sibling": apply.Applied,
	}
	for id, o := range want {
		if outcomes[id] != o {
			t.Errorf("%s: %s, want %s", id, outcomes[id], o)
		}
	}
	if _, err := os.Stat(filepath.Join(h.root, "sibling")); err != nil {
		t.Errorf("sibling not applied: %v", err)
	}
	var b strings.Builder
	rep.Text(&b)
	if !strings.Contains(b.String(), "File/dependent: blocked: its dependency File/broken did not apply") {
		t.Errorf("report does not say why File/dependent was blocked:\n%s", b.String())
	}
}

// TestSnapshotSurvivesAFailedRun: what applied before a failure is recorded.
func TestSnapshotRecordsPartialRuns(t *testing.T) {
	h := newHost(t)
	h.write(h.root, "blocker", "x")
	h.file("broken", "/blocker/x", "x")
	h.file("fine", "/fine", "y")
	h.run(false, reconcile.Policy{})
	snap, err := state.At(h.stdir).Load()
	if err != nil {
		t.Fatal(err)
	}
	if snap.Find("File/fine") == nil {
		t.Fatal("File/fine applied but not recorded")
	}
	if snap.Find("File/broken") != nil {
		t.Fatal("File/broken failed but was recorded")
	}
}
