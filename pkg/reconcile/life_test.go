package reconcile_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// lifeHost is a host whose revisions come from a real Git repository (a
// file:// URL), driven through reconcile.Life as sync --wait drives it.
type lifeHost struct {
	t           *testing.T
	repo        *gittest.Repo
	root, stdir string
	policy      reconcile.RevisionPolicy
	cur         *reconcile.Session // open: the state lock goes with it
}

func newLifeHost(t *testing.T) *lifeHost {
	h := &lifeHost{t: t, repo: gittest.NewRepo(t), root: t.TempDir(), stdir: t.TempDir(),
		policy: reconcile.RevisionPolicy{MinReady: 100 * time.Millisecond, ProgressDeadline: 3 * time.Second}}
	t.Cleanup(func() { supervise.StopAll(h.stdir) })
	return h
}

// commit makes a revision whose Process web runs command, and whose File
// says v.
func (h *lifeHost) commit(v, command string) string {
	h.repo.Commit(v, map[string]*string{
		"web.yaml":  gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: web}\nspec:\n  command: " + command + "\n  startLimit: 2\n  restartDelay: 50ms\n"),
		"conf.yaml": gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: conf}\nspec: {path: /etc/app.conf, content: \"" + v + "\\n\"}\n"),
	})
	return "main@sha1:" + h.repo.Head()
}

// open fetches the branch's head and opens the engine on it, to write
// (closing the one open before).
func (h *lifeHost) open() (*reconcile.Session, *reconcile.Life) {
	h.t.Helper()
	if h.cur != nil {
		h.cur.Close()
	}
	ctx := context.Background()
	src := &source.Git{URL: "file://" + h.repo.Dir, Branch: "main", Cache: state.At(filepath.Join(h.stdir, "cache")), Timeout: 20 * time.Second}
	d, err := reconcile.Load(ctx, src, resource.Options{}, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	s, err := reconcile.Open(ctx, reconcile.Config{Root: h.root, StateDir: h.stdir, Concurrency: 2, LockTimeout: 5 * time.Second}, d, true)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { s.Close(); d.Close() })
	h.cur = s
	s.Policy = reconcile.Policy{Prune: true, WaitTimeout: time.Second, Revisions: h.policy}
	return s, s.Life(src, resource.Options{})
}

// deploy offers the head, applies it and judges it.
func (h *lifeHost) deploy() (reconcile.Outcome, *reconcile.Session, *reconcile.Life) {
	h.t.Helper()
	ctx := context.Background()
	s, l := h.open()
	out := l.Offer(ctx, s.Desired(), nil, true, time.Now())
	if out.Phase != reconcile.PhaseOnTrial {
		h.t.Fatalf("offered %s: %s (%v)", out.Revision, out.Phase, out.Why)
	}
	// The trial is on disk before anything is applied: a status run by
	// hand (another process) reads it there.
	snap, err := state.At(h.stdir).Load()
	if err != nil {
		h.t.Fatal(err)
	}
	if tr := snap.Trial(); tr == nil || tr.Revision != out.Revision || tr.Verdict != state.Pending {
		h.t.Fatalf("the revision on trial, as saved: %+v", tr)
	}
	if _, err := s.Sync(ctx, s.Plan(ctx), state.Retention{}); err != nil {
		h.t.Fatal(err)
	}
	return l.Verdict(ctx, out.Trial, s.Await(ctx, out.Trial, nil)), s, l
}

// TestLifeRollsBackABadRevision: good, then bad and rolled back to the
// good one (loaded, recorded and adopted in that order); resume does not
// end an automatic rollback and names retry; retry does; a newer commit
// ends the hold too.
func TestLifeRollsBackABadRevision(t *testing.T) {
	h := newLifeHost(t)
	good := h.commit("v1", `[sleep, "1000"]`)
	if out, s, _ := h.deploy(); out.Phase != reconcile.PhaseGood || s.View().LastGood.Revision != good {
		t.Fatalf("the first revision: %s %v", out.Phase, out.Why)
	}
	bad := h.commit("v2", `[sh, -c, "exit 3"]`)
	out, s, l := h.deploy()
	if out.Phase != reconcile.PhaseRolledBack || out.To != good || out.Desired == nil || out.Desired.Revision() != good || s.Desired() != out.Desired {
		t.Fatalf("the bad revision: %s to %q (%v)", out.Phase, out.To, out.Why)
	}
	view := s.View()
	if view.Pin == nil || view.Pin.Revision != good || view.Pin.Manual || !view.Refused(bad) || view.Trial() != nil {
		t.Fatalf("recorded: pin %+v, refused %v, trial %+v", view.Pin, view.Refused(bad), view.Trial())
	}
	ctx := context.Background()
	if _, err := s.Sync(ctx, s.Plan(ctx), state.Retention{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(h.root, "etc/app.conf")); string(b) != "v1\n" {
		t.Fatalf("rolled back to %q", b)
	}
	if _, err := l.Resume(ctx); !errors.Is(err, reconcile.ErrAutomaticRollback) || !strings.Contains(err.Error(), "cortex-sync retry applies "+bad) {
		t.Fatalf("resume after an automatic rollback: %v", err)
	}
	if s.View().Pin == nil {
		t.Fatal("resume ended an automatic rollback")
	}
	// Offered again (a poll), it is held, naming what ends the hold.
	d, err := reconcile.Load(ctx, &source.Git{URL: "file://" + h.repo.Dir, Branch: "main", Cache: state.At(filepath.Join(h.stdir, "cache"))}, resource.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if o := l.Offer(ctx, d, nil, true, time.Now()); o.Phase != reconcile.PhaseHeld || !errors.Is(o.Why, reconcile.ErrRevisionRefused) || o.To != good || o.Desired != nil {
		t.Fatalf("offered again: %s to %q (%v)", o.Phase, o.To, o.Why)
	}
	if rev, err := l.Retry(ctx); err != nil || rev != bad {
		t.Fatalf("retry: %q %v", rev, err)
	}
	if _, err := l.Retry(ctx); !errors.Is(err, reconcile.ErrNothingToRetry) {
		t.Fatalf("a second retry: %v", err)
	}
	if _, err := l.Resume(ctx); !errors.Is(err, reconcile.ErrNothingToResume) {
		t.Fatalf("resume with nothing to end: %v", err)
	}
}

// TestLifeReplacedTrial: a revision adopted while another is on trial
// ends that one's line unjudged: one revision is on trial at a time, and
// status shows the newest one's verdict, not the last applied in full.
func TestLifeReplacedTrial(t *testing.T) {
	h := newLifeHost(t)
	first := h.commit("v1", `[sleep, "1000"]`)
	s, l := h.open()
	ctx := context.Background()
	if out := l.Offer(ctx, s.Desired(), nil, true, time.Now()); out.Phase != reconcile.PhaseOnTrial {
		t.Fatalf("first: %s", out.Phase)
	}
	second := h.commit("v2", `[sleep, "1001"]`)
	s, l = h.open()
	out := l.Offer(ctx, s.Desired(), nil, true, time.Now())
	if out.Phase != reconcile.PhaseOnTrial || out.Revision != second {
		t.Fatalf("second: %s %s", out.Phase, out.Revision)
	}
	view := s.View()
	if tr := view.Trial(); tr == nil || tr.Revision != second {
		t.Fatalf("on trial: %+v", tr)
	}
	if a := view.Latest(first); a == nil || a.Verdict != "" || !strings.Contains(a.Reason, "replaced by "+second) {
		t.Fatalf("the first, replaced: %+v", a)
	}
	if st := s.Status(ctx); st.Verdict == nil || st.Verdict.Revision != second || st.Verdict.Verdict != state.Pending {
		t.Fatalf("status verdict: %+v", st.Verdict)
	}
}

// TestLifeFailureLimit: a process that fails quickly twice and then comes
// up (its database was not up yet) leaves its revision good under the
// default policy (bad only at its startLimit); with failureLimit 1, its
// first quick failure makes the revision bad at once.
func TestLifeFailureLimit(t *testing.T) {
	for _, limit := range []int{0, 1} {
		h := newLifeHost(t)
		h.policy.ProgressDeadline = 20 * time.Second
		h.policy.FailureLimit = limit
		count := filepath.Join(t.TempDir(), "count")
		h.commit("v1", `[sh, -c, 'n=$(cat `+count+` 2>/dev/null || echo 0); echo $((n+1)) > `+count+`; [ "$n" -ge 1 ] && exec sleep 1000; exit 1']`)
		// startLimit 2 in the manifest: one quick failure stays short of it.
		out, _, _ := h.deploy()
		switch {
		case limit == 0 && out.Phase != reconcile.PhaseGood:
			t.Errorf("default policy: %s: %v", out.Phase, out.Why)
		case limit == 1 && (out.Phase != reconcile.PhaseHalted || !strings.Contains(out.Why.Error(), "failed quickly once (failureLimit 1)")):
			t.Errorf("failureLimit 1: %s: %v", out.Phase, out.Why)
		}
	}
}
