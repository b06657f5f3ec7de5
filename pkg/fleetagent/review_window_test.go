package fleetagent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/internal/syncbuf"
	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// startClocked is fixture.start with the deploy windows read on clock.
func (f *fixture) startClocked(name string, clock func() time.Time) *host {
	f.t.Helper()
	h := &host{f: f, name: name, root: f.t.TempDir(), state: f.t.TempDir(), log: &syncbuf.Buffer{}, events: &recorder{}, clock: clock}
	f.mu.Lock()
	f.hosts[name] = h
	f.mu.Unlock()
	f.t.Cleanup(func() { h.stop(); supervise.StopAll(h.state) })
	return f.start(name)
}

// A host queued for a slot inside its deploy window, whose window then
// closes, asks the rollout for nothing more (the window gate is asked
// first): but its place in the queue stays while it lives, and the hosts
// queued behind it wait for ever with the slot free. docs/fleet.md and
// pkg/agent/window.go: "a host outside its window asks for no slot, so it
// holds none and blocks no one".
func TestReviewWindowClosingWhileQueuedBlocksNoOne(t *testing.T) {
	f := newFixture(t, etcdtest.Shared(t).Endpoints(), "{maxUnavailable: 1, minReady: 4s, progressDeadline: 60s}")
	f.rules = "    - match: {name: night}\n      paths: [base]\n      windows: [{schedule: \"0 3 * * *\", duration: 1h}]\n"
	var now atomic.Int64 // night's clock: in its window
	now.Store(time.Date(2026, 12, 6, 3, 30, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	v1 := f.version("v1", true, false)
	h1, h2 := f.start("h1"), f.start("h2")
	night := f.startClocked("night", clock)
	for _, h := range []*host{h1, h2, night} {
		h.good(v1, 2*time.Minute)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: f.endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	queued := func(h string) bool {
		r, err := cli.Get(context.Background(), "/cortex-sync/"+f.fleet+"/queue/"+h, clientv3.WithCountOnly())
		return err == nil && r.Count == 1
	}
	v2 := f.version("v2", true, false)
	h1.fetch()
	h1.waitTold(events.RolloutSlotTaken, v2) // h1 applies v2 for minReady 4 s
	night.fetch()
	night.waitFor(10*time.Second, "night queued", func() bool { return queued("night") })
	h2.fetch()
	h2.waitFor(10*time.Second, "h2 queued", func() bool { return queued("h2") })
	now.Store(time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC).UnixNano()) // night's window closed
	h1.good(v2, time.Minute)
	for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if st := h2.status(); st.LastGood != nil && st.LastGood.Revision == v2 {
			return
		}
	}
	t.Errorf("h2 still waits for v2 40 s after the slot freed, queued behind night (outside its window; queued: %v)", queued("night"))
	// The control: with night's place deleted by hand, h2 goes.
	if _, err := cli.Delete(context.Background(), "/cortex-sync/"+f.fleet+"/queue/night"); err != nil {
		t.Fatal(err)
	}
	h2.good(v2, 30*time.Second)
	t.Log("with night's queue key deleted by hand, h2 took v2")
}
