package reconcile_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// TestMain lets this test binary serve as the supervisor it starts.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.ShimArg {
		os.Exit(supervise.RunShim(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// trialHost is a host synced through the engine, as sync --wait does, with
// its revisions named as a Git source names them.
type trialHost struct {
	*host
	policy reconcile.RevisionPolicy
	open   *reconcile.Session
}

func newTrialHost(t *testing.T) *trialHost {
	h := &trialHost{host: newHost(t), policy: reconcile.RevisionPolicy{MinReady: 200 * time.Millisecond, ProgressDeadline: time.Minute}}
	t.Cleanup(func() { supervise.StopAll(h.stdir) })
	return h
}

func (h *trialHost) process(name, command, probe string) {
	h.write(h.repo, name+".yaml", "apiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: "+name+"}\nspec:\n  command: "+command+"\n"+probe)
}

// sync applies the repository as revision rev, then judges it on keys (nil:
// what the sync applied); it returns the judgement and the session, open.
func (h *trialHost) sync(rev string, keys []resource.ID) (reconcile.Judgement, *reconcile.Session) {
	h.t.Helper()
	if h.open != nil {
		h.open.Close() // the state lock goes with it
	}
	ctx := context.Background()
	d, err := reconcile.Load(ctx, &source.Dir{Dir: h.repo}, resource.Options{}, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { d.Close() })
	d.Checkout.Revision = rev
	s, err := reconcile.Open(ctx, reconcile.Config{Root: h.root, StateDir: h.stdir, Concurrency: 2, LockTimeout: 5 * time.Second}, d, true)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { s.Close() })
	h.open = s
	s.Policy = reconcile.Policy{Prune: true, WaitTimeout: time.Second, Revisions: h.policy}
	start := time.Now()
	wasOn := s.View().Revision == rev
	rep, err := s.Sync(ctx, s.Plan(ctx), state.Retention{})
	if err != nil {
		h.t.Fatal(err)
	}
	if keys == nil {
		keys = rep.Tried() // as sync --wait judges
	}
	tr := s.Begin(d, keys, wasOn, start)
	if tr == nil {
		h.t.Fatalf("%s not put on trial", rev)
	}
	j := s.Await(ctx, tr, nil)
	s.Judge(tr, j, time.Now())
	return j, s
}

// TestTrialGood: a revision whose process gets ready and stays so for
// minReady is good, and the last known good.
func TestTrialGood(t *testing.T) {
	h := newTrialHost(t)
	h.process("web", `[sleep, "1000"]`, "  readinessProbe: {exec: {command: [\"true\"]}}\n")
	j, s := h.sync("main@sha1:1111111111111111111111111111111111111111", nil)
	if j.Verdict != state.Good {
		t.Fatalf("judged %s: %s", j.Verdict, j.Why())
	}
	snap := s.View()
	if snap.LastGood == nil || snap.LastGood.Revision != "main@sha1:1111111111111111111111111111111111111111" {
		t.Fatalf("last good %+v", snap.LastGood)
	}
	if a := snap.Latest(snap.LastGood.Revision); a == nil || a.Verdict != state.Good || a.ToGood() < h.policy.MinReady {
		t.Fatalf("history %+v", a)
	}
}

// TestTrialJudgesWhatTheRevisionChanged: a process the revision left alone
// cannot make it bad (rolling back would not cure it); judged on all of
// the revision, it does.
func TestTrialJudgesWhatTheRevisionChanged(t *testing.T) {
	h := newTrialHost(t)
	h.policy.ProgressDeadline = time.Second
	h.process("never", `[sleep, "1001"]`, "  readinessProbe: {exec: {command: [\"false\"]}, period: 1s}\n")
	h.file("a", "/etc/a", "one")
	if j, _ := h.sync("main@sha1:1111111111111111111111111111111111111111", nil); j.Verdict != state.Bad || j.Failing != "Process/never" {
		t.Fatalf("the first revision: %s, %s", j.Verdict, j.Why())
	}
	h.file("a", "/etc/a", "two")
	j, _ := h.sync("main@sha1:2222222222222222222222222222222222222222", nil)
	if j.Verdict != state.Good {
		t.Fatalf("a revision that changed File/a only: %s: %s", j.Verdict, j.Why())
	}
	h.file("a", "/etc/a", "three")
	j, _ = h.sync("main@sha1:3333333333333333333333333333333333333333", []resource.ID{"File/a", "Process/never"})
	if j.Verdict != state.Bad || j.Failing != "Process/never" || j.Cause != reconcile.CauseUnhealthy || !strings.Contains(j.Reason, "is Progressing") || !strings.Contains(j.Reason, "after the progress deadline (1s)") {
		t.Fatalf("judged on Process/never: %s: %s (%s)", j.Verdict, j.Why(), j.Cause)
	}
}

// TestTrialBadAtOnce: a process failed at its startLimit, and a resource
// that does not apply, make a revision bad at once, not at its deadline.
func TestTrialBadAtOnce(t *testing.T) {
	h := newTrialHost(t)
	// Stuck once it reaches its startLimit: a crash loop short of it may
	// yet come up (TestLifeFailureLimit).
	h.process("crash", `[sh, -c, "exit 3"]`, "  restartPolicy: Always\n  startLimit: 2\n  restartDelay: 50ms\n")
	j, _ := h.sync("main@sha1:1111111111111111111111111111111111111111", nil)
	if j.Verdict != state.Bad || j.Failing != "Process/crash" || !strings.Contains(j.Reason, "is Degraded") || strings.Contains(j.Reason, "deadline") {
		t.Fatalf("a crash loop: %s: %s", j.Verdict, j.Why())
	}
	h2 := newTrialHost(t)
	h2.write(h2.root, "etc", "a file where a directory must be")
	h2.file("a", "/etc/a", "one")
	j, _ = h2.sync("main@sha1:1111111111111111111111111111111111111111", nil)
	if j.Verdict != state.Bad || j.Failing != "File/a" || j.Cause != reconcile.CauseApply || !strings.Contains(j.Reason, "did not apply") {
		t.Fatalf("an apply failure: %s: %s (%s)", j.Verdict, j.Why(), j.Cause)
	}
}

// TestTrialHostCheck: a host check that fails keeps the revision from
// good, and makes it bad at the deadline, named.
func TestTrialHostCheck(t *testing.T) {
	h := newTrialHost(t)
	h.policy.ProgressDeadline = time.Second
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	h.policy.Checks = []reconcile.HostCheck{{Name: "ssh", TCP: &health.TCPProbe{Address: addr}}}
	h.file("a", "/etc/a", "one")
	j, _ := h.sync("main@sha1:1111111111111111111111111111111111111111", nil)
	if j.Verdict != state.Bad || j.Failing != "check ssh" || j.Cause != reconcile.CauseCheck || !strings.Contains(j.Reason, "tcp "+addr) {
		t.Fatalf("%s: %s (%s)", j.Verdict, j.Why(), j.Cause)
	}
	c, err := reconcile.ParseHostCheck(`{name: ssh, tcp: {address: "` + addr + `"}}`)
	if err != nil || c.TCP == nil || c.TCP.Address != addr {
		t.Fatalf("parse: %+v %v", c, err)
	}
	for _, bad := range []string{`{name: x}`, `{tcp: {address: "a:1"}}`, `{name: x, tcp: {address: "a:1"}, bogus: 1}`, `{name: x, http: {url: "ftp://x"}}`} {
		if _, err := reconcile.ParseHostCheck(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// gate is a revision gate from outside the engine that records what it
// was asked and told.
type gate struct {
	asked  []string
	judged []string
	hold   error
}

func (g *gate) Admit(_ context.Context, rev string) error {
	g.asked = append(g.asked, rev)
	return g.hold
}

func (g *gate) Judged(rev string, v state.Verdict, _ string) {
	g.judged = append(g.judged, rev+" "+string(v))
}

// TestAdmit: a rollback pins the host and refuses the bad revision until a
// newer commit or a retry; a gate from outside is asked about new
// revisions only, and told their verdicts.
func TestAdmit(t *testing.T) {
	h := newTrialHost(t)
	h.file("a", "/etc/a", "one")
	const r1, r2, r3 = "main@sha1:1111111111111111111111111111111111111111", "main@sha1:2222222222222222222222222222222222222222", "main@sha1:3333333333333333333333333333333333333333"
	j, s := h.sync(r1, nil)
	if j.Verdict != state.Good {
		t.Fatal(j.Why())
	}
	g := &gate{}
	s.AddRevisionGate(g)
	ctx := context.Background()
	if adm := s.Admit(ctx, r1); adm.Stay != nil || len(g.asked) != 0 {
		t.Fatalf("the revision the host is on: %v, gate asked %v", adm.Stay, g.asked)
	}
	g.hold = errors.New("no slot")
	if adm := s.Admit(ctx, r2); adm.Stay != g.hold || adm.Pin != "" {
		t.Fatalf("held by the gate: %+v", adm)
	}
	g.hold = nil
	if adm := s.Admit(ctx, r2); adm.Stay != nil {
		t.Fatal(adm.Stay)
	}
	tr := &reconcile.Trial{Revision: r2, Start: time.Now()}
	s.View() // r2 is recorded as on trial by Begin in a real run
	if err := s.RecordRollback(ctx, reconcile.Rollback{To: r1, From: r2, Head: r2, Reason: "Process/web is Degraded"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	s.Judge(tr, reconcile.Judgement{Verdict: state.Bad, Failing: "Process/web", Reason: "is Degraded"}, time.Now())
	if adm := s.Admit(ctx, r2); !errors.Is(adm.Stay, reconcile.ErrRevisionHeld) || adm.Pin != r1 {
		t.Fatalf("the pinned head: %+v", adm)
	}
	if st := s.Status(ctx); st.OnRollback == nil || st.Converged() {
		t.Fatalf("status on a rollback: %+v", st.OnRollback)
	}
	if adm := s.Admit(ctx, r3); adm.Stay != nil {
		t.Fatalf("a newer commit: %v", adm.Stay)
	}
	if g.judged[len(g.judged)-1] != r2+" bad" || g.judged[0] != r1+" good" && len(g.judged) != 1 {
		t.Fatalf("the gate was told %v", g.judged)
	}
	if rev, err := s.Release(ctx, false); err != nil || rev != "" {
		t.Fatalf("resume released an automatic rollback: %q %v", rev, err)
	}
	if rev, err := s.Release(ctx, true); err != nil || rev != r2 {
		t.Fatalf("retry released %q, %v", rev, err)
	}
	if adm := s.Admit(ctx, r2); adm.Stay != nil {
		t.Fatalf("after retry: %v", adm.Stay)
	}
	for in, want := range map[string]string{"": r1, r1: r1, "main@sha1:1111111": r1, "1111111": r1, "111111": r1, "1111": r1} {
		if got, err := reconcile.ResolveApplied(s.View(), in); err != nil || got != want {
			t.Errorf("ResolveApplied(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := reconcile.ResolveApplied(s.View(), r3); !errors.Is(err, reconcile.ErrNotApplied) {
		t.Errorf("a revision never applied: %v", err)
	}
	if _, err := reconcile.ResolveApplied(s.View(), "111"); !errors.Is(err, reconcile.ErrNotApplied) || !strings.Contains(err.Error(), "at least 4 hex digits") {
		t.Errorf("too short a prefix: %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.stdir, "state.json")); err != nil {
		t.Fatal(err)
	}
}
