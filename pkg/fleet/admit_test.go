package fleet

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// closed reports whether ch is closed, waiting up to d for it.
func closed(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// A freed slot wakes the waiter at the front of the queue, not the
// fleet: the one behind it wakes when the front takes the slot, and the
// waiters go in the order they queued.
func TestFreedSlotWakesTheFrontOnly(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 4)
	ctx := context.Background()
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("1", 0, 1, 0)}
	waitFor(t, 10*time.Second, "slot leases", func() bool {
		for _, m := range ms {
			m.mu.Lock()
			l := m.slotLease
			m.mu.Unlock()
			if l == 0 {
				return false
			}
		}
		return true
	})
	if d, err := ms[0].Admit(ctx, rev); err != nil || !d.Go {
		t.Fatalf("first host: %+v %v", d, err)
	}
	for _, m := range ms[1:] { // queued in this order
		if d, err := m.Admit(ctx, rev); err != nil || d.Go || d.Wait != WaitSlot {
			t.Fatalf("%s: %+v %v", m.Host(), d, err)
		}
	}
	front, second, third := ms[1].Changed(), ms[2].Changed(), ms[3].Changed()
	time.Sleep(300 * time.Millisecond) // the watches are set up
	if err := ms[0].Good(ctx, rev.ID); err != nil {
		t.Fatal(err)
	}
	if !closed(front, 5*time.Second) {
		t.Fatal("the front of the queue is not woken by the freed slot")
	}
	if closed(second, 500*time.Millisecond) || closed(third, 0) {
		t.Fatal("a waiter behind the front is woken by a freed slot: every slot change would reach the whole fleet")
	}
	// The third asks first: it is not its turn.
	if d, err := ms[3].Admit(ctx, rev); err != nil || d.Go {
		t.Fatalf("the third waiter jumped the queue: %+v %v", d, err)
	}
	third = ms[3].Changed()
	if d, err := ms[1].Admit(ctx, rev); err != nil || !d.Go {
		t.Fatalf("the front: %+v %v", d, err)
	}
	if !closed(second, 5*time.Second) {
		t.Fatal("the second waiter is not woken when the one ahead of it took its slot")
	}
	if closed(third, 500*time.Millisecond) {
		t.Fatal("the third waiter is woken when the host two ahead of it took a slot")
	}
}

// A host's slot outlives neither its slot lease nor its place in the
// queue: both are gone when the host's agent dies, and its presence,
// on a lease of its own, may be longer.
func TestSlotOnItsOwnLease(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	c := newClient(t, cl.Endpoints())
	m, err := Join(c, MemberConfig{Host: resource.Host{Name: "a"}, PresenceTTL: 30 * time.Second, SlotTTL: ttl, Debounce: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("1", 0, 1, 0)}
	waitFor(t, 10*time.Second, "admitted", func() bool {
		d, err := m.Admit(ctx, rev)
		return err == nil && d.Go
	})
	r := dial(t, cl.Endpoints())
	resp, err := r.cli.Get(ctx, r.key("slot")+"/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("slot keys: %v %v", resp, err)
	}
	m.crash()
	waitFor(t, 3*ttl, "the slot freed after the slot TTL", func() bool {
		resp, err := r.cli.Get(ctx, r.key("slot")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	})
	if row(read(t, r, ""), "a").Stale {
		t.Fatal("the host is stale after the slot TTL: presence has its own, longer lease")
	}
}
