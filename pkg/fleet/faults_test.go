package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
)

// rollThrough runs every host of ms through a rollout of rev, each as a
// host does (wait for a slot, hold it for minReady, report good), and
// returns a channel closed when all are through, and the sim counting
// hosts in transition.
func rollThrough(t *testing.T, ctx context.Context, ms []*Member, rev Revision) (*sim, <-chan struct{}) {
	s := &sim{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			for ctx.Err() == nil {
				if s.apply(ctx, m, rev, false) {
					return
				}
			}
			t.Errorf("%s never got through", m.Host())
		})
	}
	go func() { wg.Wait(); close(done) }()
	return s, done
}

// slotsTaken counts the slot keys in etcd.
func slotsTaken(t *testing.T, c *Client) int64 {
	t.Helper()
	resp, err := c.cli.Get(context.Background(), c.key("slot")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// The leader killed mid-rollout: the rollout goes on under the new
// leader, never over its budget, and leaves no slot behind.
func TestRolloutSurvivesLeaderKilled(t *testing.T) {
	t.Parallel()
	cl := etcdtest.New(t)
	ms := hosts(t, cl, 12)
	c := dial(t, cl.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("3", 0, 1, 300*time.Millisecond)}
	s, done := rollThrough(t, ctx, ms, rev)
	waitFor(t, 30*time.Second, "a first wave admitted", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.admitted) >= 3
	})
	leader := cl.Leader()
	cl.Stop(leader)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the rollout did not complete after the leader was killed")
	}
	cl.Start(leader)
	if s.peak > 3 {
		t.Fatalf("peak in transition %d > maxUnavailable 3", s.peak)
	}
	if n := slotsTaken(t, c); n != 0 {
		t.Fatalf("%d slots left behind", n)
	}
}

// Quorum lost mid-rollout: no host takes a slot while etcd cannot
// agree; once it is back the rollout completes, with no slot leaked.
func TestRolloutQuorumLostAndRestored(t *testing.T) {
	t.Parallel()
	cl := etcdtest.New(t)
	ms := hosts(t, cl, 8)
	c := dial(t, cl.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("2", 0, 1, time.Second)}
	s, done := rollThrough(t, ctx, ms, rev)
	waitFor(t, 30*time.Second, "a first wave admitted", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.admitted) >= 2
	})
	leader := cl.Leader()
	var stopped []int
	for i := range cl.Members {
		if i != leader && len(stopped) < 2 {
			stopped = append(stopped, i)
		}
	}
	stopped = append(stopped[:1], leader) // the leader and one other: no quorum
	for _, i := range stopped {
		cl.Stop(i)
	}
	time.Sleep(2 * time.Second) // takes in flight land meanwhile
	s.mu.Lock()
	before := len(s.admitted)
	s.mu.Unlock()
	time.Sleep(3 * time.Second)
	s.mu.Lock()
	during := len(s.admitted)
	s.mu.Unlock()
	if during != before {
		t.Fatalf("%d hosts admitted while etcd had no quorum", during-before)
	}
	for _, i := range stopped {
		cl.Start(i)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the rollout did not complete after quorum came back")
	}
	if s.peak > 2 {
		t.Fatalf("peak in transition %d > maxUnavailable 2", s.peak)
	}
	waitFor(t, 10*time.Second, "no slot left behind", func() bool { return slotsTaken(t, c) == 0 })
}

// Slot holders killed (as SIGKILL would: nothing revoked): their slots
// free when their slot leases expire, and the others roll on.
func TestSlotHoldersKilled(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 6)
	c := dial(t, cl.Endpoints())
	ctx := context.Background()
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("2", 0, 1, 200*time.Millisecond)}
	for _, m := range ms[:2] {
		if d, err := m.Admit(ctx, rev); err != nil || !d.Go {
			t.Fatalf("%s: %+v %v", m.Host(), d, err)
		}
		m.crash()
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	t0 := time.Now()
	s, done := rollThrough(t, rctx, ms[2:], rev)
	select {
	case <-done:
	case <-rctx.Done():
		t.Fatal("the rollout stalled behind the killed holders' slots")
	}
	if took := time.Since(t0); took < ttl/2 {
		t.Fatalf("the others went after %s: the killed holders' slots did not count until their leases ended", took)
	}
	if s.peak > 2 {
		t.Fatalf("peak in transition %d > maxUnavailable 2", s.peak)
	}
	if n := slotsTaken(t, c); n != 0 {
		t.Fatalf("%d slots left behind", n)
	}
}
