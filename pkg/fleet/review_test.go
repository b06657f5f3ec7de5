package fleet

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// A host whose slot lease ended (expired while it was cut off from etcd;
// revoked here) lost its slot, and another host took the same slot key.
// The first host's verdict, sent before its keep-alive learns of the
// loss, deletes slot/0 by key alone: the second host's slot. A third host
// then takes it: two hosts in transition with maxUnavailable 1.
func TestReviewVerdictAfterSlotLeaseLostFreesAnothersSlot(t *testing.T) {
	cl := etcdtest.Shared(t)
	// A slot TTL of 30 s: the keep-alive learns of a lost lease up to
	// 10 s late (it asks every TTL/3), as after a partition.
	a, err := Join(newClient(t, cl.Endpoints()), MemberConfig{Host: resource.Host{Name: "a"}, PresenceTTL: 30 * time.Second, SlotTTL: 30 * time.Second, Debounce: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.crash)
	b := join(t, cl.Endpoints(), "b", nil)
	c := join(t, cl.Endpoints(), "c", nil)
	ctx := context.Background()
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("1", 0, 1, 0)}
	waitFor(t, 10*time.Second, "a admitted", func() bool {
		d, err := a.Admit(ctx, rev)
		return err == nil && d.Go
	})
	a.mu.Lock()
	lease, slot := a.slotLease, a.slot
	a.mu.Unlock()
	r := dial(t, cl.Endpoints())
	if _, err := r.cli.Revoke(ctx, lease); err != nil { // as an expiry would
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "b admitted", func() bool {
		d, err := b.Admit(ctx, rev)
		return err == nil && d.Go
	})
	a.mu.Lock()
	stale := a.slot == slot
	a.mu.Unlock()
	if !stale {
		t.Skip("a's keep-alive saw the lost lease first: the race was not hit")
	}
	if err := a.Good(ctx, rev.ID); err != nil {
		t.Fatal(err)
	}
	resp, err := r.cli.Get(ctx, r.key("slot")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 1 {
		t.Errorf("b applies, yet %d slot keys are taken: a's verdict deleted b's slot", resp.Count)
	}
	if d, err := c.Admit(ctx, rev); err == nil && d.Go {
		t.Fatal("c admitted while b applies: two hosts in transition with maxUnavailable 1")
	}
}

// Quorum lost is not slow: a member that answers on a live connection
// but cannot commit (no leader) is an outage. A write then fails fast as
// unreachable, as the package promises ("every call is bounded and fails
// fast, as a typed error, while it cannot be reached"), instead of being
// retried with a doubling timeout while the client says etcd is slow.
func TestReviewQuorumLostIsNotSlow(t *testing.T) {
	cl := etcdtest.New(t)
	c, err := Dial(Config{Endpoints: cl.Endpoints()[:1], Fleet: fleetOf(t), RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.Hold(ctx, "h", "test", ""); err != nil {
		t.Fatal(err)
	}
	cl.Stop(1)
	cl.Stop(2)
	said := make(chan string, 1)
	go func() { // what the host says while the write waits
		time.Sleep(2500 * time.Millisecond)
		said <- c.Slow()
	}()
	t0 := time.Now()
	err = c.Hold(ctx, "h", "test", "again")
	took := time.Since(t0)
	slow := <-said
	t.Logf("write without quorum: %v after %s; said meanwhile %q", err, took.Round(time.Millisecond), slow)
	if err == nil {
		t.Fatal("a write without quorum succeeded")
	}
	if took > 3*time.Second {
		t.Errorf("a write without quorum took %s to fail (request timeout 1s): retried as if etcd were slow", took.Round(time.Millisecond))
	}
	if slow != "" {
		t.Errorf("quorum lost reported as slow: %s", slow)
	}
}

// Slow is not down, but a slow etcd applies a request the client gave up
// on. A's verdict reaches etcd, frees slot/0, and its answer comes after
// A's request timeout; call() sends the verdict again, with twice the
// timeout. Meanwhile b, at the front of the queue, took slot/0: the
// retried verdict, which deletes slot/0 by key alone, deletes b's slot,
// and c, next in the queue, takes it while b applies (maxUnavailable 1).
func TestReviewVerdictRetriedBySlowCallFreesAnothersSlot(t *testing.T) {
	cl := etcdtest.Shared(t)
	p := etcdtest.NewProxy(t, cl.Endpoints()[0])
	ac, err := Dial(Config{Endpoints: []string{p.URL}, Fleet: fleetOf(t), RequestTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Join(ac, MemberConfig{Host: resource.Host{Name: "a"}, PresenceTTL: 30 * time.Second, SlotTTL: 30 * time.Second, Debounce: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.crash)
	b := join(t, cl.Endpoints(), "b", nil)
	c := join(t, cl.Endpoints(), "c", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("1", 0, 1, 0)}
	waitFor(t, 10*time.Second, "a admitted", func() bool {
		d, err := a.Admit(ctx, rev)
		return err == nil && d.Go
	})
	admitted := make(chan string, 2)
	for _, m := range []*Member{b, c} { // they queue, b first, and apply for ever
		if d, err := m.Admit(ctx, rev); err != nil || d.Go {
			t.Fatalf("%s: %+v %v", m.Host(), d, err)
		}
	}
	for _, m := range []*Member{b, c} {
		go func() {
			if waitAdmit(ctx, m, rev) {
				admitted <- m.Host()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the watches are set up
	p.SetDelay(400 * time.Millisecond) // each way: a's requests take 800 ms
	if err := a.Good(ctx, rev.ID); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(0)
	t.Logf("a's client after the verdict: %q", ac.Slow())
	var in []string
	for len(in) < 2 {
		select {
		case h := <-admitted:
			in = append(in, h)
			continue
		case <-time.After(5 * time.Second):
		}
		break
	}
	if len(in) > 1 {
		t.Fatalf("%v both admitted with maxUnavailable 1, neither done: a's retried verdict deleted b's slot", in)
	}
	if len(in) == 0 {
		t.Fatal("no waiter admitted after a's verdict")
	}
}

// A canary of R that moves to R+1 (a supersede: the slot moves) leaves
// its canary place on R behind: no verdict on R deletes it (the host no
// longer holds R), and it lives on the host's slot lease, so for as long
// as the host lives. R's other hosts wait for a canary that will never
// report, and fleet status shows it applying R.
func TestReviewSupersededCanaryLeavesItsPlace(t *testing.T) {
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 3)
	a, b := ms[0], ms[1]
	ctx := context.Background()
	r1 := Revision{ID: "main@sha1:1", Rollout: rollout("2", 1, 1, 0)}
	r2 := Revision{ID: "main@sha1:2", Rollout: rollout("2", 1, 1, 0)}
	waitFor(t, 10*time.Second, "a admitted to r1 as its canary", func() bool {
		d, err := a.Admit(ctx, r1)
		return err == nil && d.Go
	})
	if d, err := a.Admit(ctx, r2); err != nil || !d.Go {
		t.Fatalf("a moves to r2: %+v %v", d, err)
	}
	if err := a.Good(ctx, r2.ID); err != nil {
		t.Fatal(err)
	}
	resp, err := a.cli.Get(ctx, a.key("rollout", revKey(r1.ID), "canary")+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, kv := range resp.Kvs {
		left = append(left, string(kv.Key))
	}
	d, err := b.Admit(ctx, r1)
	t.Logf("b asks for r1: %+v %v", d, err)
	if len(left) > 0 {
		t.Fatalf("a, good on r2 and holding nothing, still holds r1's canary place %v", left)
	}
}
