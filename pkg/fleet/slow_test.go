package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// These tests use pkg/fleet's exported API only, as an agent does
// (fleetagent): Dial, Join, Admit until a go (again on Changed or at
// RetryAfter, a second after an error), Good.

// TestSlowEtcd: an etcd that answers slowly (every byte between the hosts
// and the members delayed each way, so every request takes twice that or
// more) slows a rollout down; it is not an outage. Hosts with an agent's
// defaults (3 s request timeout, presence and slot leases) roll a
// revision out through the delaying proxies: every host ends good, no
// presence key is deleted and no host loses its presence lease meanwhile
// (no lease expired), and no host ever says the coordinator is
// unreachable (not in an error, not in its Condition, not in its log).
func TestSlowEtcd(t *testing.T) {
	for _, tc := range []struct {
		delay    time.Duration
		hosts    int
		wantSlow bool // hosts must say etcd is slow (Slow)
	}{
		{delay: 300 * time.Millisecond, hosts: 20},
		// A request then takes 2 s, a presence lease's grant and put 4 s:
		// past the 3 s a call first has, so the hosts must wait longer on
		// a connection that is up, and say etcd is slow, not unreachable.
		{delay: time.Second, hosts: 10, wantSlow: true},
	} {
		t.Run(tc.delay.String(), func(t *testing.T) {
			slowRollout(t, tc.delay, tc.hosts, tc.wantSlow)
		})
	}
}

func slowRollout(t *testing.T, delay time.Duration, n int, wantSlow bool) {
	cl := etcdtest.Shared(t)
	ps := cl.ProxyAll(t)
	for _, p := range ps {
		p.SetDelay(delay)
	}
	name := fleetName(t)
	// Presence lost: a DELETE of a presence key, seen on a watch straight
	// on the members (not through the proxies).
	direct := rawClient(t, cl.Endpoints())
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	deletes := make(chan string, n*4)
	wch := direct.Watch(wctx, "/cortex-sync/"+name+"/presence/", clientv3.WithPrefix(), clientv3.WithFilterPut())
	var wwg sync.WaitGroup
	wwg.Go(func() {
		for resp := range wch {
			for _, ev := range resp.Events {
				deletes <- string(ev.Kv.Key)
			}
		}
	})
	logs := &lineLog{}
	ms := joinAll(t, etcdtest.URLs(ps), name, 0, n, slog.New(logs))
	waitPresent(t, ms, 60*time.Second)

	// Conditions, sampled while the rollout goes on.
	sctx, stopSampling := context.WithCancel(context.Background())
	var conds []string
	slow := map[string]bool{} // hosts that said etcd is slow
	var absent []string       // hosts seen without their presence lease
	var swg sync.WaitGroup
	swg.Go(func() {
		for sctx.Err() == nil {
			for _, m := range ms {
				if c := m.Condition(); c != "" {
					conds = append(conds, m.Host()+": "+c)
				}
				if m.Slow() != "" {
					slow[m.Host()] = true
				}
				if !m.Present() {
					absent = append(absent, m.Host())
				}
			}
			sleepCtx(sctx, 100*time.Millisecond)
		}
	})
	rev := fleet.Revision{ID: "main@sha1:slow", Rollout: resource.Rollout{
		MaxUnavailable: resource.IntOrPercent{Value: 5}, MinReady: resource.Duration(500 * time.Millisecond), FailureThreshold: 1}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	r := rollThrough(ctx, ms, rev, 0)
	took := time.Since(t0)
	stopSampling()
	swg.Wait()
	stopWatch()
	wwg.Wait()
	close(deletes)

	t.Logf("%d hosts through a %s delay each way: rollout in %.1fs, peak %d of 5 in transition, %d asks; %d hosts said etcd is slow",
		n, delay, took.Seconds(), r.peak, r.asks, len(slow))
	if r.good != n {
		t.Errorf("%d of %d hosts good after %s: the rollout did not complete", r.good, n, took.Round(time.Millisecond))
	}
	if r.peak > 5 {
		t.Errorf("peak %d hosts in transition > maxUnavailable 5", r.peak)
	}
	var lost []string
	for k := range deletes {
		lost = append(lost, k)
	}
	if len(lost) > 0 {
		t.Errorf("%d presence keys deleted during the rollout (leases expired): %s", len(lost), strings.Join(first(lost, 5), ", "))
	}
	if len(absent) > 0 {
		t.Errorf("%d samples of a host without its presence lease during the rollout: %s", len(absent), strings.Join(first(absent, 5), ", "))
	}
	var unreachable []string
	for _, err := range r.errs {
		if errors.Is(err, fleet.ErrUnreachable) || strings.Contains(err.Error(), "unreachable") {
			unreachable = append(unreachable, err.Error())
		}
	}
	if len(unreachable) > 0 {
		t.Errorf("%d calls failed as unreachable on an etcd that only answers slowly; first: %s", len(unreachable), unreachable[0])
	}
	if len(conds) > 0 {
		t.Errorf("%d samples of a host's condition said unreachable; first: %s", len(conds), conds[0])
	}
	if l := logs.matching("unreachable"); len(l) > 0 {
		t.Errorf("%d log lines say unreachable; first: %s", len(l), l[0])
	}
	if wantSlow && len(slow) == 0 {
		t.Errorf("no host said etcd is slow (Slow), though every request took %s or more", 2*delay)
	}
}

// fleetName is a fleet of the test's own on a shared cluster.
func fleetName(t testing.TB) string {
	return "x-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
}

func rawClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// joinAll joins n hosts (h<from>, h<from+1>, …), each on its own client
// as agents are, with an agent's defaults; they leave when the test ends.
func joinAll(t testing.TB, endpoints []string, name string, from, n int, log *slog.Logger) []*fleet.Member {
	t.Helper()
	ms := make([]*fleet.Member, n)
	for i := range n {
		c, err := fleet.Dial(fleet.Config{Endpoints: endpoints, Fleet: name, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		m, err := fleet.Join(c, fleet.MemberConfig{Host: resource.Host{Name: fmt.Sprintf("h%03d", from+i)}})
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = m
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, m := range ms {
			wg.Go(func() { m.Close() })
		}
		wg.Wait()
	})
	return ms
}

func waitPresent(t testing.TB, ms []*fleet.Member, limit time.Duration) {
	t.Helper()
	for end := time.Now().Add(limit); ; time.Sleep(50 * time.Millisecond) {
		present := 0
		for _, m := range ms {
			if m.Present() {
				present++
			}
		}
		if present == len(ms) {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d of %d hosts present after %s", present, len(ms), limit)
		}
	}
}

// rolled is what a rollout through hosts saw.
type rolled struct {
	mu          sync.Mutex
	inUse, peak int
	good, asks  int
	errs        []error // of Admit and Good
}

func (r *rolled) add(f func(*rolled)) {
	r.mu.Lock()
	f(r)
	r.mu.Unlock()
}

// rollThrough rolls rev through every host as agents do: ask for a slot
// until it is a go (again on Changed or at RetryAfter; a second after an
// error, as fleetagent does), apply (hold it apply, then minReady), report
// good (again a second after an error). It returns when every host is
// good or ctx ended.
func rollThrough(ctx context.Context, ms []*fleet.Member, rev fleet.Revision, apply time.Duration) *rolled {
	r := &rolled{}
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			for {
				r.add(func(r *rolled) { r.asks++ })
				d, err := m.Admit(ctx, rev)
				if err == nil && d.Go {
					break
				}
				if ctx.Err() != nil {
					return
				}
				wait := d.RetryAfter
				if err != nil {
					r.add(func(r *rolled) { r.errs = append(r.errs, err) })
					wait = time.Second
				}
				select {
				case <-ctx.Done():
					return
				case <-m.Changed():
				case <-time.After(wait):
				}
			}
			r.add(func(r *rolled) { r.inUse++; r.peak = max(r.peak, r.inUse) })
			if !sleepCtx(ctx, apply+rev.Rollout.MinReady.Std()) {
				return
			}
			r.add(func(r *rolled) { r.inUse-- })
			for {
				vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := m.Good(vctx, rev.ID)
				cancel()
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					return
				}
				r.add(func(r *rolled) { r.errs = append(r.errs, err) })
				if !sleepCtx(ctx, time.Second) {
					return
				}
			}
			r.add(func(r *rolled) { r.good++ })
		})
	}
	wg.Wait()
	return r
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

func first(xs []string, n int) []string { return xs[:min(n, len(xs))] }

// lineLog is a slog handler that keeps each record's message and
// attributes as a line.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *lineLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *lineLog) WithGroup(string) slog.Handler            { return l }
func (l *lineLog) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return nil
}

func (l *lineLog) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}
