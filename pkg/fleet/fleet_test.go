package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// ttl is the presence TTL of the tests' hosts: etcd's least (1.5 s with
// its default timing, rounded up).
const ttl = 2 * time.Second

// newClient is a client of the test fleet; the caller closes it.
func newClient(t testing.TB, endpoints []string) *Client {
	t.Helper()
	c, err := Dial(Config{Endpoints: endpoints, Fleet: fleetOf(t), RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fleetOf is the test's own fleet: tests on the shared cluster keep to
// keys of their own.
func fleetOf(t testing.TB) string {
	return "test-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
}

func TestMain(m *testing.M) {
	code := m.Run()
	etcdtest.StopShared()
	os.Exit(code)
}

func dial(t testing.TB, endpoints []string) *Client {
	c := newClient(t, endpoints)
	t.Cleanup(func() { c.Close() })
	return c
}

func join(t testing.TB, endpoints []string, name string, labels map[string]string) *Member {
	t.Helper()
	m, err := Join(newClient(t, endpoints), MemberConfig{Host: resource.Host{Name: name, Labels: labels}, PresenceTTL: ttl, Debounce: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.crash() })
	waitFor(t, 10*time.Second, name+" present", m.Present)
	return m
}

// crash stops the member as a SIGKILL would: nothing revoked, the
// connection gone.
func (m *Member) crash() {
	m.cancel()
	m.wg.Wait()
	m.Client.Close()
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("still not %s after %s", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func read(t testing.TB, c *Client, head string) *Report {
	t.Helper()
	r, err := c.Read(context.Background(), head)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func row(r *Report, host string) *HostRow {
	for i := range r.Hosts {
		if r.Hosts[i].Host == host {
			return &r.Hosts[i]
		}
	}
	return nil
}

func TestStatusAndLeaseExpiry(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own; most of the time is waiting on leases
	cl := etcdtest.Shared(t)
	a := join(t, cl.Endpoints(), "a", map[string]string{"role": "web"})
	b := join(t, cl.Endpoints(), "b", nil)
	c := dial(t, cl.Endpoints())
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, m := range []*Member{a, b} {
		m.SetStatus(HostStatus{Revision: "main@sha1:2", Head: "main@sha1:2", HeadTime: at, Sync: "Synced", Health: "Healthy", LastGood: "main@sha1:2"})
	}
	waitFor(t, 5*time.Second, "both rows written", func() bool {
		r := read(t, c, "")
		return len(r.Hosts) == 2 && row(r, "a").Revision != "" && row(r, "b").Revision != ""
	})
	r := read(t, c, "")
	if !r.Converged || r.Head != "main@sha1:2" || row(r, "a").Labels["role"] != "web" || row(r, "a").Stale {
		t.Fatalf("converged fleet read as %+v", r)
	}
	// On its last good revision, which is its head: on it, not behind.
	if h := row(r, "a"); !h.OnLastGood || h.BehindHead {
		t.Fatalf("a host on its last good head read as %+v", h)
	}
	// A newer head on one host: not converged.
	b.SetStatus(HostStatus{Revision: "main@sha1:2", Head: "main@sha1:3", HeadTime: at.Add(time.Minute), Sync: "Synced", Health: "Healthy", LastGood: "main@sha1:2"})
	waitFor(t, 5*time.Second, "b's head read", func() bool { return read(t, c, "").Head == "main@sha1:3" })
	if r := read(t, c, ""); r.Converged || !row(r, "b").OnLastGood || !row(r, "b").BehindHead {
		t.Fatalf("a fleet behind its head read as %+v", r)
	}
	b.SetStatus(HostStatus{Revision: "main@sha1:2", Head: "main@sha1:2", HeadTime: at, Sync: "Synced", Health: "Healthy"})
	// b's agent dies: its row goes stale once its lease expires, and a
	// stale host does not keep the fleet from converging.
	waitFor(t, 5*time.Second, "converged again", func() bool { return read(t, c, "").Converged })
	b.crash()
	waitFor(t, 3*ttl, "b stale", func() bool { return row(read(t, c, ""), "b").Stale })
	r = read(t, c, "")
	if !r.Converged || row(r, "a").Stale {
		t.Fatalf("after b's lease expired: %+v", r)
	}
	if len(r.Revisions) != 1 || r.Revisions[0].Hosts != 1 || r.Revisions[0].Stale != 1 {
		t.Fatalf("summary %+v", r.Revisions)
	}
}

func TestStatusWrittenOnChangeOnly(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own; most of the time is waiting on leases
	cl := etcdtest.Shared(t)
	a := join(t, cl.Endpoints(), "a", nil)
	c := dial(t, cl.Endpoints())
	s := HostStatus{Revision: "r1", Sync: "Synced", Health: "Healthy"}
	a.SetStatus(s)
	waitFor(t, 5*time.Second, "status written", func() bool { return row(read(t, c, ""), "a").Revision == "r1" })
	rev := func() int64 {
		resp, err := c.cli.Get(context.Background(), c.key("status", "a"))
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatal(err)
		}
		return resp.Kvs[0].ModRevision
	}
	before := rev()
	for range 20 { // a reconcile a time, nothing changed
		a.SetStatus(s)
	}
	a.SetStatus(HostStatus{Revision: "r1", Sync: "OutOfSync", Health: "Healthy"})
	a.SetStatus(s) // … and back, within the debounce
	time.Sleep(0)  // let the writer run
	waitFor(t, 5*time.Second, "writer idle", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.written != nil && a.written.same(a.want) && len(a.poke) == 0
	})
	if after := rev(); after != before {
		t.Fatalf("the status key was rewritten (mod revision %d → %d) though nothing changed", before, after)
	}
}

// sim is hosts applying a revision under Admit, counting how many apply at
// once (between a go and their verdict).
type sim struct {
	mu       sync.Mutex
	now      int
	peak     int
	peakBad  int // the peak after the first bad verdict
	sawBad   bool
	admitted []string
	failAt   int // the host admitted in this place (1-based) fails its gate
}

// enter counts a host in; it reports whether it is the one to fail.
func (s *sim) enter(h string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now++
	s.admitted = append(s.admitted, h)
	s.peak = max(s.peak, s.now)
	if s.sawBad {
		s.peakBad = max(s.peakBad, s.now)
	}
	return len(s.admitted) == s.failAt
}

func (s *sim) leave(bad bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now--
	s.sawBad = s.sawBad || bad
}

// apply runs one host through a rollout of rev: wait for a slot, apply
// (hold it for minReady), report. It returns false if ctx ended first.
func (s *sim) apply(ctx context.Context, m *Member, rev Revision, bad bool) bool {
	if !waitAdmit(ctx, m, rev) {
		return false
	}
	bad = s.enter(m.Host()) || bad
	time.Sleep(rev.Rollout.MinReady.Std()) // the health gate's minReady
	s.leave(bad)
	var err error
	if bad {
		err = m.Bad(ctx, rev.ID, "readiness failed")
	} else {
		err = m.Good(ctx, rev.ID)
	}
	return err == nil
}

// waitAdmit asks for a slot until it is a go, waiting between asks as a
// host does: until Changed, or RetryAfter. False: ctx ended first.
func waitAdmit(ctx context.Context, m *Member, rev Revision) bool {
	for {
		d, err := m.Admit(ctx, rev)
		if err == nil && d.Go {
			return true
		}
		wait := d.RetryAfter
		if err != nil {
			wait = 200 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return false
		case <-m.Changed():
		case <-time.After(wait):
		}
	}
}

func rollout(maxUnavailable string, canary, threshold int, minReady time.Duration) resource.Rollout {
	mu, err := resource.ParseIntOrPercent(maxUnavailable)
	if err != nil {
		panic(err)
	}
	return resource.Rollout{MaxUnavailable: mu, Canary: canary, FailureThreshold: threshold, MinReady: resource.Duration(minReady)}
}

func hosts(t *testing.T, cl *etcdtest.Cluster, n int) []*Member {
	ms := make([]*Member, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ms[i] = join(t, cl.Endpoints(), fmt.Sprintf("h%02d", i), nil) })
	}
	wg.Wait()
	return ms
}

func TestRolloutMaxUnavailable(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own; most of the time is waiting on leases
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 12)
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("3", 0, 2, 300*time.Millisecond)}
	s := &sim{failAt: 4} // the fourth host to go fails its gate: mid-rollout
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			if !s.apply(ctx, m, rev, false) {
				t.Errorf("%s never got through", m.Host())
			}
		})
	}
	wg.Wait()
	if s.peak > 3 || s.peak < 2 {
		t.Fatalf("peak in transition %d, want at most maxUnavailable 3 (and more than one at once)", s.peak)
	}
	if s.peakBad > 2 {
		t.Fatalf("after a host was bad, %d applied at once: its kept slot must leave 2", s.peakBad)
	}
	r := read(t, dial(t, cl.Endpoints()), "")
	ro := r.Rollouts[0]
	if len(ro.Good) != 11 || len(ro.Bad) != 1 || ro.Bad[0] != s.admitted[3] || ro.State != "progressing" || len(ro.Applying) != 0 {
		t.Fatalf("rollout %+v", ro)
	}
}

func TestCanaryFailurePauses(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own; most of the time is waiting on leases
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 5)
	rev := Revision{ID: "main@sha1:bad", Rollout: rollout("2", 1, 3, 100*time.Millisecond)}
	s := &sim{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() { s.apply(ctx, m, rev, true) }) // the revision never gets ready anywhere
	}
	c := dial(t, cl.Endpoints())
	waitFor(t, 10*time.Second, "the canary's failure", func() bool {
		r := read(t, c, "")
		return len(r.Rollouts) == 1 && len(r.Rollouts[0].Bad) == 1
	})
	// The others keep asking for a while: none may go.
	for _, m := range ms {
		if d, err := m.Admit(context.Background(), rev); err == nil && d.Go {
			if s.admitted[0] != m.Host() {
				t.Errorf("%s admitted after the canary failed", m.Host())
			}
		} else if err == nil && !strings.Contains(d.Why, "paused: canary "+s.admitted[0]+" (readiness failed) bad") && s.admitted[0] != m.Host() {
			t.Errorf("%s told %q", m.Host(), d.Why)
		}
	}
	cancel()
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.admitted) != 1 {
		t.Fatalf("admitted %v: only the canary may have gone", s.admitted)
	}
	r := read(t, c, "")
	if ro := r.Rollouts[0]; ro.State != StatePaused || !strings.Contains(ro.Why, "canary") {
		t.Fatalf("rollout %+v", ro)
	}
	// resume forgives the failure: the rest go, the canary counted bad.
	if _, err := c.SetRollout(context.Background(), "", StateActive, "test", ""); err != nil {
		t.Fatal(err)
	}
	if d, err := ms[1].Admit(context.Background(), rev); err != nil || !d.Go {
		// ms[1] may be the canary; then ms[2] goes
		if d2, err2 := ms[2].Admit(context.Background(), rev); err2 != nil || !d2.Go {
			t.Fatalf("after resume: %+v %v / %+v %v", d, err, d2, err2)
		}
	}
}

func TestOfflineHostDoesNotBlock(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own; most of the time is waiting on leases
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 3)
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("1", 0, 1, 0)}
	if d, err := ms[0].Admit(context.Background(), rev); err != nil || !d.Go {
		t.Fatalf("first host: %+v %v", d, err)
	}
	if d, err := ms[1].Admit(context.Background(), rev); err != nil || d.Go || !strings.Contains(d.Why, "waiting for a slot: 1 of 1 taken (1 applying") {
		t.Fatalf("second host while the first applies: %+v %v", d, err)
	}
	ms[0].crash() // its agent dies holding the slot
	waitFor(t, 3*ttl, "h01 admitted once h00's lease expired", func() bool {
		d, err := ms[1].Admit(context.Background(), rev)
		return err == nil && d.Go
	})
}

func TestHeldHostPassedBy(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own; most of the time is waiting on leases
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 3)
	c := dial(t, cl.Endpoints())
	if err := c.Hold(context.Background(), "h00", "ops", "disk swap"); err != nil {
		t.Fatal(err)
	}
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("1", 0, 1, 50*time.Millisecond)}
	d, err := ms[0].Admit(context.Background(), rev)
	if err != nil || d.Go || !strings.Contains(d.Why, "held by ops") || !strings.Contains(d.Why, "(disk swap)") {
		t.Fatalf("held host: %+v %v", d, err)
	}
	s := &sim{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range ms[1:] {
		if !s.apply(ctx, m, rev, false) {
			t.Fatalf("%s blocked behind a held host", m.Host())
		}
	}
	if r := read(t, c, ""); row(r, "h00").Held == "" {
		t.Fatalf("status does not show the hold: %+v", row(r, "h00"))
	}
	if ok, err := c.Unhold(context.Background(), "h00"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if !s.apply(ctx, ms[0], rev, false) {
		t.Fatal("h00 not admitted after release")
	}
}

func TestMaintenanceFile(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own; most of the time is waiting on leases
	cl := etcdtest.Shared(t)
	c, err := Dial(Config{Endpoints: cl.Endpoints(), Fleet: fleetOf(t)})
	if err != nil {
		t.Fatal(err)
	}
	file := t.TempDir() + "/" + MaintenanceName
	m, err := Join(c, MemberConfig{Host: resource.Host{Name: "a"}, PresenceTTL: ttl, MaintenanceFile: file})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	waitFor(t, 10*time.Second, "present", m.Present)
	writeFile(t, file, "kernel upgrade\n")
	rev := Revision{ID: "r", Rollout: rollout("1", 0, 1, 0)}
	if d, err := m.Admit(context.Background(), rev); err != nil || d.Go || !strings.Contains(d.Why, "maintenance") || !strings.Contains(d.Why, "kernel upgrade") {
		t.Fatalf("%+v %v", d, err)
	}
	removeFile(t, file)
	if d, err := m.Admit(context.Background(), rev); err != nil || !d.Go {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestPauseAbortSupersede(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own; most of the time is waiting on leases
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 3)
	c := dial(t, cl.Endpoints())
	ctx := context.Background()
	r1 := Revision{ID: "main@sha1:1", Rollout: rollout("1", 0, 1, 0)}
	if d, _ := ms[0].Admit(ctx, r1); !d.Go {
		t.Fatal(d)
	}
	if got, err := c.SetRollout(ctx, "", StatePaused, "ops", "look first"); err != nil || got != r1.ID {
		t.Fatal(got, err)
	}
	if err := ms[0].Good(ctx, r1.ID); err != nil {
		t.Fatal(err)
	}
	if d, _ := ms[1].Admit(ctx, r1); d.Go || !strings.Contains(d.Why, "paused by ops") {
		t.Fatalf("paused rollout: %+v", d)
	}
	if _, err := c.SetRollout(ctx, r1.ID, StateActive, "ops", ""); err != nil {
		t.Fatal(err)
	}
	if d, _ := ms[1].Admit(ctx, r1); !d.Go {
		t.Fatalf("resumed rollout: %+v", d)
	}
	// A newer revision: h01's slot moves to it (one host, one slot); the
	// older rollout's state does not hold the newer one up.
	if _, err := c.SetRollout(ctx, r1.ID, StateAborted, "ops", ""); err != nil {
		t.Fatal(err)
	}
	r2 := Revision{ID: "main@sha1:2", Rollout: rollout("1", 0, 1, 0)}
	if d, _ := ms[1].Admit(ctx, r2); !d.Go {
		t.Fatalf("newer revision: %+v", d)
	}
	if d, _ := ms[2].Admit(ctx, r2); d.Go {
		t.Fatalf("a second slot of 1: %+v", d)
	}
	if d, _ := ms[2].Admit(ctx, r1); d.Go || !strings.Contains(d.Why, "aborted by ops") {
		t.Fatalf("aborted rollout: %+v", d)
	}
	if _, err := c.SetRollout(ctx, "main@sha1:9", StatePaused, "ops", ""); !errors.Is(err, ErrNoRollout) {
		t.Fatalf("pause of no rollout: %v", err)
	}
	rs := read(t, c, "").Rollouts
	if len(rs) != 2 || rs[1].Revision != r2.ID || !rs[1].Newest || rs[0].State != StateAborted || rs[1].Applying[0] != "h01" {
		t.Fatalf("rollouts %+v", rs)
	}
}

func TestEtcdDown(t *testing.T) {
	t.Parallel() // a cluster of its own: it stops every member
	cl := etcdtest.New(t)
	ms := hosts(t, cl, 2)
	c := dial(t, cl.Endpoints())
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("1", 0, 1, 0)}
	cl.StopAll()
	ctx := context.Background()
	for range 3 { // the first call waits for the request timeout, the rest fail at once
		d, err := ms[0].Admit(ctx, rev)
		if d.Go || !errors.Is(err, ErrUnreachable) {
			t.Fatalf("Admit with every member down: %+v %v", d, err)
		}
	}
	if _, err := c.Read(ctx, ""); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Read: %v", err)
	}
	if _, err := c.Read(ctx, ""); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "coordinator unreachable since ") {
		t.Fatalf("Read again: %v", err)
	}
	if cond := c.Condition(); !strings.Contains(cond, "coordinator unreachable since") {
		t.Fatalf("condition %q", cond)
	}
	// Status set while etcd is down reaches it when it is back.
	ms[1].SetStatus(HostStatus{Revision: "main@sha1:0", Sync: "Synced", Health: "Healthy"})
	cl.StartAll()
	waitFor(t, 20*time.Second, "status flushed after etcd came back", func() bool {
		r, err := c.Read(ctx, "")
		return err == nil && row(r, "h01") != nil && row(r, "h01").Revision == "main@sha1:0"
	})
	if c.Condition() != "" {
		t.Fatalf("condition after recovery: %q", c.Condition())
	}
	waitFor(t, 20*time.Second, "admitted after etcd came back", func() bool {
		d, err := ms[0].Admit(ctx, rev)
		return err == nil && d.Go
	})
}
