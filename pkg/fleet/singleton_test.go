package fleet

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
)

// window is when one holder may have run the singleton: from its election
// to its fence (Done), on BootTime.
type window struct {
	host       string
	start, end time.Duration
}

// overlap is the longest time two windows ran together.
func overlap(ws []window) time.Duration {
	var worst time.Duration
	for i := range ws {
		for j := i + 1; j < len(ws); j++ {
			if d := min(ws[i].end, ws[j].end) - max(ws[i].start, ws[j].start); d > worst {
				worst = d
			}
		}
	}
	return worst
}

// candidate campaigns for the singleton until ctx ends, each holding
// recorded as a window; lose ends one holding as the test wants (a kill,
// a partition) and returns a fresh client to campaign with again.
type candidate struct {
	name string
	c    *Client
}

type election struct {
	mu      sync.Mutex
	windows []window
	holder  chan *held
}

type held struct {
	cand *candidate
	h    *Holder
}

func (e *election) run(ctx context.Context, logf func(string, ...any), cand *candidate, ttl time.Duration) {
	for ctx.Err() == nil {
		h, err := cand.c.Campaign(ctx, "db-backup", cand.name, ttl)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, ErrUnreachable) {
				logf("%s: campaign: %v", cand.name, err)
			}
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		start := BootTime()
		select {
		case e.holder <- &held{cand, h}:
		case <-ctx.Done():
		}
		select {
		case <-h.Done():
		case <-ctx.Done():
			h.Resign(context.Background())
		}
		// The process stops at the fence: its window ends at the later of
		// the deadline and the moment Done was seen.
		end := max(BootTime(), h.Deadline())
		e.mu.Lock()
		e.windows = append(e.windows, window{cand.name, start, end})
		e.mu.Unlock()
		return
	}
}

func TestSingletonNoOverlap(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"kill", "partition"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			singletonFailovers(t, how, 3)
		})
	}
}

// singletonFailovers elects a holder among three hosts n times, ending
// each holding by how, and measures the holders' overlap.
func singletonFailovers(t testing.TB, how string, n int) (worst time.Duration, failover []time.Duration) {
	cl := etcdtest.Shared(t) // candidates in a fleet of their own; a cut is a proxy of their own
	const ttl = 2 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := &election{holder: make(chan *held)}
	var wg sync.WaitGroup
	proxies := map[string][]*etcdtest.Proxy{}
	spawn := func(name string) {
		eps := cl.Endpoints()
		if how == "partition" {
			ps := cl.ProxyAll(t)
			proxies[name], eps = ps, etcdtest.URLs(ps)
		}
		cand := &candidate{name: name, c: newClient(t, eps)}
		wg.Go(func() { e.run(ctx, t.Logf, cand, ttl) })
	}
	names := []string{"a", "b", "c"}
	for _, nm := range names {
		spawn(nm)
	}
	gen := 0
	for range n {
		var cur *held
		select {
		case cur = <-e.holder:
		case <-time.After(30 * time.Second):
			t.Fatal("no holder elected within 30s")
		}
		lost := BootTime()
		switch how {
		case "kill": // SIGKILL as etcd sees it: the connection gone, nothing revoked
			cur.cand.c.Close()
		case "partition":
			for _, p := range proxies[cur.cand.name] {
				p.Cut()
			}
		}
		<-cur.h.Done()
		// The next holder: measure how long after the loss it was elected.
		select {
		case next := <-e.holder:
			failover = append(failover, BootTime()-lost)
			go func() { e.holder <- next }() // it is the next round's holder
		case <-time.After(30 * time.Second):
			t.Fatal("no new holder within 30s of the loss")
		}
		// The lost host comes back as a fresh candidate under a new name.
		gen++
		spawn(cur.cand.name + string(rune('0'+gen%10)))
	}
	cancel()
	wg.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.windows) < n {
		t.Fatalf("%d windows for %d failovers", len(e.windows), n)
	}
	worst = overlap(e.windows)
	if worst > 0 {
		t.Fatalf("holders overlapped for %s: %+v", worst, e.windows)
	}
	return worst, failover
}

func TestSingletonFencedWrite(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	a, b := dial(t, cl.Endpoints()), dial(t, cl.Endpoints())
	ctx := context.Background()
	h, err := a.Campaign(ctx, "job", "a", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Put(ctx, "last-run", "a1"); err != nil {
		t.Fatal(err)
	}
	// a stops renewing without revoking (a SIGKILL); b takes over; a's
	// write through its stale election key is refused by etcd itself.
	h.abandon()
	h2, err := b.Campaign(ctx, "job", "b", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Resign(ctx)
	h.mu.Lock()
	h.closed, h.deadline = false, BootTime()+time.Hour // pretend a's fence failed
	h.mu.Unlock()
	if err := h.Put(ctx, "last-run", "a2"); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale holder's write: %v", err)
	}
	if err := h2.Put(ctx, "last-run", "b1"); err != nil {
		t.Fatal(err)
	}
	if v, err := a.SingletonValue(ctx, "job", "last-run"); err != nil || v != "b1" {
		t.Fatalf("value %q %v", v, err)
	}
}

// abandon stops renewing without revoking: what etcd sees of a holder
// that was SIGKILLed. For tests.
func (h *Holder) abandon() {
	h.cancel()
	h.wg.Wait()
}
