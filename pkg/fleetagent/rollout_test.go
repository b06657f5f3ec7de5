package fleetagent

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

const minReady = 500 * time.Millisecond

// oneAtATime checks that the starts of a version came one host at a time:
// each at least minReady after the one before (the process's own
// timestamps), one per host of names.
func oneAtATime(t *testing.T, f *fixture, v string, names ...string) []start {
	t.Helper()
	starts := f.starts(v)
	var got []string
	for i, s := range starts {
		got = append(got, f.hostOf(s.root))
		if i > 0 && s.at-starts[i-1].at < minReady.Seconds() {
			t.Errorf("%s started %s %.3fs after %s: less than minReady (%s) apart", v, got[i], s.at-starts[i-1].at, got[i-1], minReady)
		}
	}
	want := slices.Clone(names)
	slices.Sort(want)
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	if !slices.Equal(sorted, want) {
		t.Errorf("%s started on %v; want once on each of %v", v, got, want)
	}
	return starts
}

// TestRolloutOneAtATime: a change that restarts a gated Process restarts
// the hosts one at a time under maxUnavailable 1, each start at least
// minReady after the one before (as the processes timed themselves), the
// canary first; fleet status then says every host is on the head.
func TestRolloutOneAtATime(t *testing.T) {
	t.Parallel()
	f := newFixture(t, etcdtest.Shared(t).Endpoints(), "{maxUnavailable: 1, canary: 1, minReady: 500ms, progressDeadline: 30s}")
	v1 := f.version("v1", true, false)
	names := []string{"h1", "h2", "h3", "h4"}
	var hosts []*host
	for _, n := range names {
		hosts = append(hosts, f.start(n))
	}
	for _, h := range hosts {
		h.good(v1, time.Minute)
	}
	oneAtATime(t, f, "v1", names...) // a first install takes slots too

	v2 := f.version("v2", true, false)
	for _, h := range hosts {
		h.fetch()
	}
	for _, h := range hosts {
		h.good(v2, time.Minute)
	}
	starts := oneAtATime(t, f, "v2", names...)
	r := f.read()
	ro := r.Rollouts[len(r.Rollouts)-1]
	if ro.Revision != v2 || len(ro.Good) != 4 || ro.State != fleet.StateComplete {
		t.Errorf("rollout of v2: %+v; want 4 good, complete", ro)
	}
	if len(ro.Good) > 0 && f.hostOf(starts[0].root) != ro.StartedBy {
		t.Errorf("the rollout was started by %s, but %s restarted first", ro.StartedBy, f.hostOf(starts[0].root))
	}
	waitConverged(t, f, v2)
}

// waitConverged waits until fleet status says every live host is Synced
// and Healthy on head: the hosts' status keys caught up.
func waitConverged(t *testing.T, f *fixture, head string) {
	t.Helper()
	var r *fleet.Report
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r = f.read(); r.Converged && r.Head == head {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	for _, h := range r.Hosts {
		t.Logf("%s: %s %s %s phase %q stale %v %s", h.Host, h.Revision, h.Sync, h.Health, h.Phase, h.Stale, h.LastError)
	}
	t.Fatalf("fleet status is not converged on %s (head %s)", head, r.Head)
}

// TestCanaryFailure: a revision whose readiness never passes stops at the
// canary: it rolls itself back to its last good revision (its process
// runs the last good spec again), the rollout pauses, and no other host
// changes anything.
func TestCanaryFailure(t *testing.T) {
	t.Parallel()
	f := newFixture(t, etcdtest.Shared(t).Endpoints(), "{maxUnavailable: 1, canary: 1, minReady: 500ms, progressDeadline: 3s}")
	v1 := f.version("v1", true, false)
	hosts := []*host{f.start("h1"), f.start("h2"), f.start("h3")}
	for _, h := range hosts {
		h.good(v1, time.Minute)
	}
	v2 := f.version("v2", false, false)
	for _, h := range hosts {
		h.fetch()
	}
	var ro fleet.RolloutStatus
	hosts[0].waitFor(time.Minute, "the rollout of v2 paused", func() bool {
		for _, r := range f.read().Rollouts {
			if r.Revision == v2 {
				ro = r
			}
		}
		return ro.State == fleet.StatePaused
	})
	if len(ro.Bad) != 1 || len(ro.Good) != 0 {
		t.Fatalf("rollout of v2: %+v; want the one canary bad", ro)
	}
	canary := f.hosts[ro.Bad[0]]
	canary.waitFor(30*time.Second, "rolled back to v1", func() bool {
		st := canary.status()
		return st.Revision == v1 && st.OnRollback != nil && st.OnRollback.Head == v2
	})
	for _, h := range hosts {
		if h == canary {
			continue
		}
		h.waitFor(30*time.Second, "told the rollout is paused", func() bool {
			hb := h.status().Agent.HeldBack
			return hb != nil && hb.Revision == v2 && strings.Contains(hb.Error, "paused")
		})
		if st := h.status(); st.Revision != v1 {
			t.Errorf("%s is on %s; want v1: only the canary may apply v2", h.name, st.Revision)
		}
		if e := h.waitTold(events.RolloutPaused, v2); e.Severity != events.Warning || e.Condition != "rollout" || !strings.Contains(e.Message, "paused") || e.Host != h.name {
			t.Errorf("%s told %+v; want a warning that the rollout of v2 is paused", h.name, e)
		}
		if e := h.events.told(events.RolloutSlotTaken, v2); e != nil {
			t.Errorf("%s told %+v; only the canary takes a slot", h.name, e)
		}
	}
	if e := canary.waitTold(events.RolloutSlotTaken, v2); e.Severity != events.Info || e.Condition != "rollout" {
		t.Errorf("the canary told %+v; want the slot taken for v2", e)
	}
	starts := f.starts("v2")
	if len(starts) != 1 || f.hostOf(starts[0].root) != canary.name {
		t.Errorf("v2 started %d times (%v); want once, on the canary %s", len(starts), starts, canary.name)
	}
	// The canary's process runs v1 again: the rollback restarted it.
	if s := f.starts("v1"); s[len(s)-1].root != canary.root || s[len(s)-1].at < starts[0].at {
		t.Errorf("the canary's process was not restarted to v1 after v2: %v", s)
	}
	r := f.read()
	if r.Converged {
		t.Error("fleet status says converged with the rollout paused (it exits 1 then)")
	}
}

// TestPassedBy: a host held (cortex-sync hold), one in maintenance (the
// local file), one offline and one suspended are passed by: the others
// apply the revision; each catches up, under the same gates, one at a
// time, when it comes back.
func TestPassedBy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, etcdtest.Shared(t).Endpoints(), "{maxUnavailable: 1, canary: 1, minReady: 500ms, progressDeadline: 30s}")
	v1 := f.version("v1", true, false)
	names := []string{"h1", "h2", "held", "maint", "offline", "suspended"}
	hosts := map[string]*host{}
	for _, n := range names {
		hosts[n] = f.start(n)
	}
	for _, n := range names {
		hosts[n].good(v1, 2*time.Minute)
	}
	c := f.client()
	if err := c.Hold(context.Background(), "held", "test", "passed by"); err != nil {
		t.Fatal(err)
	}
	maintenance := filepath.Join(hosts["maint"].state, fleet.MaintenanceName)
	if err := os.WriteFile(maintenance, []byte("disk swap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hosts["offline"].stop()
	hosts["suspended"].a.Suspend()

	v2 := f.version("v2", true, false)
	for _, n := range names {
		if n != "offline" {
			hosts[n].fetch()
		}
	}
	hosts["h1"].good(v2, time.Minute)
	hosts["h2"].good(v2, time.Minute)
	for _, n := range []string{"held", "maint", "suspended"} {
		h := hosts[n]
		h.waitFor(30*time.Second, "holding back v2", func() bool {
			hb := h.status().Agent.HeldBack
			return hb != nil && hb.Revision == v2
		})
		if st := h.status(); st.Revision != v1 {
			t.Errorf("%s is on %s; want v1, passed by", n, st.Revision)
		}
	}
	phases := map[string]string{}
	stale := map[string]bool{}
	for _, row := range f.read().Hosts {
		phases[row.Host], stale[row.Host] = row.Phase, row.Stale
	}
	if phases["held"] != "held" || !stale["offline"] || phases["h1"] != fleet.PhaseGood {
		t.Errorf("fleet status: phases %v, stale %v; want held held, offline stale, h1 good", phases, stale)
	}
	oneAtATime(t, f, "v2", "h1", "h2")

	// Back: each catches up under the same gates.
	if _, err := c.Unhold(context.Background(), "held"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(maintenance); err != nil {
		t.Fatal(err)
	}
	f.start("offline")
	hosts["suspended"].a.Resume(context.Background())
	for _, n := range names {
		f.hosts[n].good(v2, time.Minute)
	}
	oneAtATime(t, f, "v2", names...)
	waitConverged(t, f, v2)
}

// TestHealingNeverGated: healing the revision the host is on — a process
// that crashed, a file edited by hand — asks no gate, nor the rollout,
// even while a gated revision waits: crash restarts are to the current
// spec, not a new revision.
func TestHealingNeverGated(t *testing.T) {
	t.Parallel()
	f := newFixture(t, etcdtest.Shared(t).Endpoints(), "{maxUnavailable: 1, canary: 1, minReady: 500ms, progressDeadline: 30s}")
	v1 := f.version("v1", true, false)
	h := f.start("h1")
	h.good(v1, time.Minute)
	c := f.client()
	if err := c.Hold(context.Background(), "h1", "test", "keep v2 waiting"); err != nil {
		t.Fatal(err)
	}
	f.version("v2", true, false)
	h.fetch()
	h.waitFor(30*time.Second, "v2 held back", func() bool {
		hb := h.status().Agent.HeldBack
		return hb != nil && strings.Contains(hb.Error, "held by")
	})
	asked := h.gate.asked()

	st, err := supervise.Read(h.state, "web")
	if err != nil || st == nil || !st.Process.Alive() {
		t.Fatalf("web: %+v, %v", st, err)
	}
	before := len(f.starts("v1"))
	st.Process.Signal(syscall.SIGKILL)
	conf := filepath.Join(h.root, "etc/app.conf")
	if err := os.WriteFile(conf, []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.waitFor(30*time.Second, "healed on v1", func() bool {
		b, _ := os.ReadFile(conf)
		n, _ := supervise.Read(h.state, "web")
		return string(b) == "v1\n" && n != nil && n.Process.Alive() && n.Process.PID != st.Process.PID && len(f.starts("v1")) > before
	})
	if n := len(f.starts("v1")); n != before+1 {
		t.Errorf("web started %d more times on v1; want 1 (its crash restart)", n-before)
	}
	if len(f.starts("v2")) != 0 {
		t.Error("v2 started while held")
	}
	// The gate heard only the held revision, asked again on its own
	// schedule: each ask is for v2, none for healing.
	h.gate.mu.Lock()
	for _, rev := range h.gate.admits[asked:] {
		if rev != h.status().Agent.HeldBack.Revision {
			t.Errorf("the gate was asked about %s while healing", rev)
		}
	}
	h.gate.mu.Unlock()
	if h.status().Revision != v1 {
		t.Error("the host left v1")
	}
}

// TestEtcdDown: with every etcd member stopped, a hand edit still heals,
// no host applies a gated revision, the host says the coordinator is
// unreachable and stays ready, the singleton stops at its fence, and
// fleet status cannot read (it exits 2); an agent started then runs and
// says so. When etcd is back, statuses are flushed and the revision rolls
// out, to the late host too.
func TestEtcdDown(t *testing.T) {
	t.Parallel()
	cluster := etcdtest.New(t)
	f := newFixture(t, cluster.Endpoints(), "{maxUnavailable: 1, canary: 1, minReady: 500ms, progressDeadline: 30s}")
	v1 := f.version("v1", true, true)
	hosts := []*host{f.start("h1"), f.start("h2")}
	for _, h := range hosts {
		h.good(v1, time.Minute)
	}
	running := func() []string { // on any host of the fleet, the late one too
		var out []string
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, h := range f.hosts {
			if st, _ := supervise.Read(h.state, "single"); st != nil && st.Process.Alive() {
				out = append(out, h.name)
			}
		}
		return out
	}
	hosts[0].waitFor(30*time.Second, "the singleton running on one host", func() bool { return len(running()) == 1 })

	cluster.StopAll()
	conf := filepath.Join(hosts[0].root, "etc/app.conf")
	if err := os.WriteFile(conf, []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hosts[0].waitFor(30*time.Second, "the hand edit healed", func() bool {
		b, _ := os.ReadFile(conf)
		return string(b) == "v1\n"
	})
	// status, run by hand, reads the agent's report: it follows the
	// coordinator, though nothing else changed on a quiet host.
	quiet := hosts[len(hosts)-1]
	quiet.waitFor(30*time.Second, "the report naming the coordinator unreachable", func() bool {
		r := reconcile.ReadAgentReport(state.At(quiet.state))
		return r != nil && r.Fleet != nil && strings.Contains(r.Fleet.Coordinator, "coordinator unreachable")
	})
	if e := quiet.waitTold(events.CoordinatorLost, ""); e.Severity != events.Warning || e.Condition != "coordinator" || !strings.Contains(e.Message, "coordinator unreachable") {
		t.Errorf("told %+v; want a warning that the coordinator is lost", e)
	}
	v2 := f.version("v2", true, true)
	for _, h := range hosts {
		h.fetch()
		h.waitFor(30*time.Second, "v2 held back: coordinator unreachable", func() bool {
			hb := h.status().Agent.HeldBack
			return hb != nil && hb.Revision == v2 && strings.Contains(hb.Error, "coordinator unreachable")
		})
		st := h.status()
		if st.Revision != v1 || !st.Conditions.Ready || !strings.Contains(st.Conditions.Coordinator, "coordinator unreachable") {
			t.Errorf("%s with etcd down: revision %s, conditions %+v; want v1, ready, the coordinator named", h.name, st.Revision, st.Conditions)
		}
	}
	// An agent started with etcd down runs all the same: it says why it
	// applies nothing gated, and joins when etcd is back.
	late := f.start("late")
	late.waitFor(30*time.Second, "the coordinator named unreachable", func() bool {
		return strings.Contains(late.status().Conditions.Coordinator, "coordinator unreachable")
	})
	select {
	case err := <-late.done:
		t.Fatalf("the agent started with etcd down stopped: %v", err)
	default:
	}
	hosts[0].waitFor(30*time.Second, "the singleton stopped at its fence", func() bool { return len(running()) == 0 })
	c, err := fleet.Dial(fleet.Config{Endpoints: f.endpoints, Fleet: f.fleet, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Read(context.Background(), ""); !errors.Is(err, fleet.ErrUnreachable) {
		t.Errorf("fleet status with etcd down: %v; want it unreachable (exit 2)", err)
	}
	if n := len(f.starts("v2")); n != 0 {
		t.Errorf("v2 started %d times with etcd down; want none", n)
	}

	cluster.StartAll()
	for _, h := range append(hosts, late) {
		h.good(v2, time.Minute)
	}
	if e := quiet.waitTold(events.CoordinatorBack, ""); e.Severity != events.Info || e.Condition != "coordinator" {
		t.Errorf("told %+v; want the coordinator back, clearing coordinator", e)
	}
	waitConverged(t, f, v2)
	hosts[0].waitFor(30*time.Second, "the singleton running again", func() bool { return len(running()) == 1 })
}

// TestRefusedHeadIsNotConverged: a commit every host refuses (it does not
// validate) is the fleet's head all the same: fleet status says the fleet
// is not on it, so a CI step after a broken push does not pass.
func TestRefusedHeadIsNotConverged(t *testing.T) {
	t.Parallel()
	f := newFixture(t, etcdtest.Shared(t).Endpoints(), "{maxUnavailable: 1, minReady: 200ms}")
	v1 := f.version("v1", true, false)
	hosts := []*host{f.start("h1"), f.start("h2")}
	for _, h := range hosts {
		h.good(v1, time.Minute)
	}
	hosts[0].waitFor(30*time.Second, "the fleet converged on v1", func() bool {
		r := f.read()
		return r.Converged && r.Head == v1
	})
	for _, ro := range f.read().Rollouts {
		if ro.Revision == v1 && ro.State != fleet.StateComplete {
			t.Errorf("the rollout of v1, every host good on it, reads %q (%s), want complete", ro.State, ro.Why)
		}
	}
	bad := "main@sha1:" + f.repo.Commit("broken", map[string]*string{
		"base/broken.yaml": gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: broken}\nspec: {path: /etc/broken, contnet: x}\n"),
	})
	for _, h := range hosts {
		h.fetch()
	}
	hosts[0].waitFor(30*time.Second, "the refused commit as the fleet's head", func() bool {
		return f.read().Head == bad
	})
	if r := f.read(); r.Converged {
		t.Errorf("fleet status says converged on %s, which every host refused: %+v", r.Head, r.Hosts)
	}
	for _, h := range hosts {
		if st := h.status(); st.Revision != v1 {
			t.Errorf("%s is on %s, want v1: a refused revision is never applied", h.name, st.Revision)
		}
	}
}

// canaryAlone is a 3-host fleet under rollout, all good on v1, with h2 and
// h3 held: h1 takes every new revision alone.
func canaryAlone(t *testing.T, rollout string) (f *fixture, h1 *host, v1 string) {
	t.Helper()
	f = newFixture(t, etcdtest.Shared(t).Endpoints(), rollout)
	v1 = f.version("v1", true, false)
	hosts := []*host{f.start("h1"), f.start("h2"), f.start("h3")}
	for _, h := range hosts {
		h.good(v1, time.Minute)
	}
	c := f.client()
	for _, n := range []string{"h2", "h3"} {
		if err := c.Hold(context.Background(), n, "test", "h1 alone"); err != nil {
			t.Fatal(err)
		}
	}
	return f, hosts[0], v1
}

// TestNextRevisionWaitsForVerdict (issue 30, 5c): in a 3-host fleet, v3
// arrives while the canary h1 is still judging v2. h1 judges v2 first
// (v3 is held back, saying so); only then does it take v3, as its canary
// (h2 and h3 are held); v3 is bad, and h1 rolls back to v2, its newest
// good revision — not to v1, which taking v3 mid-trial left it with.
func TestNextRevisionWaitsForVerdict(t *testing.T) {
	t.Parallel()
	f, h1, v1 := canaryAlone(t, "{maxUnavailable: 1, canary: 1, minReady: 3s, progressDeadline: 4s}")
	v2 := f.version("v2", true, false)
	h1.fetch()
	h1.waitFor(30*time.Second, "v2 applied, on trial", func() bool { return len(f.starts("v2")) == 1 && h1.status().Revision == v2 })
	v3 := f.version("v3", false, false)
	h1.fetch()
	h1.waitFor(10*time.Second, "holding v3 back until v2 is judged", func() bool {
		hb := h1.status().Agent.HeldBack
		return hb != nil && hb.Revision == v3 && strings.Contains(hb.Error, "waits until "+v2)
	})
	if st := h1.status(); st.LastGood == nil || st.LastGood.Revision != v1 {
		t.Fatalf("v2 was judged before the test could see v3 wait (minReady too short?): %+v", st.LastGood)
	}
	h1.good(v2, 30*time.Second)
	h1.waitFor(time.Minute, "v3 tried, bad, and rolled back to v2", func() bool {
		st := h1.status()
		return len(f.starts("v3")) == 1 && st.OnRollback != nil && st.OnRollback.Head == v3 && st.Revision == v2
	})
	if s := f.starts("v2"); len(s) < 2 || s[len(s)-1].at < f.starts("v3")[0].at {
		t.Errorf("h1's process does not run v2 again after v3: %v", s)
	}
	var ro2, ro3 fleet.RolloutStatus
	for _, r := range f.read().Rollouts {
		switch r.Revision {
		case v2:
			ro2 = r
		case v3:
			ro3 = r
		}
	}
	if !slices.Equal(ro2.Good, []string{"h1"}) || !slices.Equal(ro3.Bad, []string{"h1"}) {
		t.Errorf("the fleet has v2 good on %v (want h1) and v3 bad on %v (want h1)", ro2.Good, ro3.Bad)
	}
	if g := f.starts("v3")[0].at; g < f.starts("v2")[0].at+3 {
		t.Errorf("v3 started %.3fs after v2, before v2's minReady (3s) could have judged it", g-f.starts("v2")[0].at)
	}
}

// TestBadVerdictLetsWaitingRevisionIn: v3, a fix, arrives while the
// canary h1 is judging v2; v2 turns out bad and h1 rolls back to v1. The
// rollback holds h1 from v2, the bad revision, not from v3: v3 (newer
// than what was bad) is taken next and is good.
func TestBadVerdictLetsWaitingRevisionIn(t *testing.T) {
	t.Parallel()
	f, h1, _ := canaryAlone(t, "{maxUnavailable: 1, canary: 1, minReady: 500ms, progressDeadline: 4s}")
	v2 := f.version("v2", false, false)
	h1.fetch()
	h1.waitFor(30*time.Second, "v2 applied, on trial", func() bool { return len(f.starts("v2")) == 1 && h1.status().Revision == v2 })
	v3 := f.version("v3", true, false)
	h1.fetch()
	h1.waitFor(10*time.Second, "holding v3 back until v2 is judged", func() bool {
		hb := h1.status().Agent.HeldBack
		return hb != nil && hb.Revision == v3 && strings.Contains(hb.Error, "waits until "+v2)
	})
	h1.good(v3, time.Minute)
	if st := h1.status(); st.OnRollback != nil {
		t.Errorf("h1 is still held by a rollback: %+v", st.OnRollback)
	}
	if s := f.starts("v1"); s[len(s)-1].at < f.starts("v2")[0].at {
		t.Errorf("h1 did not roll back to v1 after v2 was bad: %v", s)
	}
}

// TestIgnoredSpecOnHostStatus: a recorded spec that does not pass is
// ignored, and the host's own status says so (agent.fleet.ignored), with
// the key and why; the host goes by its own rollout: and is admitted.
func TestIgnoredSpecOnHostStatus(t *testing.T) {
	t.Parallel()
	cl := etcdtest.Shared(t)
	name := "t-ignored-spec"
	l, err := New(Options{Config: fleet.Config{Endpoints: cl.Endpoints(), Fleet: name, RequestTimeout: 2 * time.Second},
		Host: resource.Host{Name: "h1"}, StateDir: t.TempDir(), PresenceTTL: 2 * time.Second, Debounce: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	rev := "main@sha1:" + strings.Repeat("e", 40)
	ro := resource.Rollout{}
	l.Fetched(agent.Fetched{Revision: rev, Fleet: name, Rollout: &ro, Changes: true})
	// Written as a host of another version naming a field differently.
	raw, err := clientv3.New(clientv3.Config{Endpoints: cl.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	key := "rollout/" + url.PathEscape(rev) + "/spec"
	if _, err := raw.Put(context.Background(), "/cortex-sync/"+name+"/"+key, `{"revision":"`+rev+`","rollout":{"budget":3}}`); err != nil {
		t.Fatal(err)
	}
	var err2 error // until the host is present
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if err2 = l.Admit(context.Background(), rev); err2 == nil {
			break
		}
	}
	if err2 != nil {
		t.Fatalf("not admitted under the host's own rollout: %v", err2)
	}
	ig := l.Info().Ignored
	if len(ig) != 1 || !strings.HasPrefix(ig[0], key+`: does not decode: json: unknown field "budget"; each host goes by the rollout: of its own fleet.yaml`) {
		t.Fatalf("the host's status does not show the ignored spec: %q", ig)
	}
}
