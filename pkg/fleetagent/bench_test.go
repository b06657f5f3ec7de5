package fleetagent

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/internal/benchstat"
	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
)

// BenchmarkAgents100: 100 real agents in this process (each its own root,
// state dir, Git cache, supervisor and web process, on one repository)
// on a real 3-member etcd roll out a change that restarts their process,
// maxUnavailable 10, minReady 1s. Reported: the rollout's time (every
// host's fetch asked at once, until every host is good on it in etcd), the
// peak of slots held at once (a watch on the slots' keys), etcd writes
// (KV revisions) per host per revision, and how long a host's new head
// takes to show in fleet status. FLEET_BENCH_HOSTS sets another count.
func BenchmarkAgents100(b *testing.B) {
	n := 100
	if v, err := strconv.Atoi(os.Getenv("FLEET_BENCH_HOSTS")); err == nil && v > 0 {
		n = v
	}
	cl := etcdtest.New(b)
	f := newFixture(b, cl.Endpoints(), "{maxUnavailable: 10, minReady: 1s, progressDeadline: 2m}")
	f.noProbe, f.defaults = true, true // the default debounce and TTLs
	// A file:// clone: a git daemon resets connections past its listen
	// backlog when 100 hosts fetch at once, which a fleet's Git server
	// would not.
	f.url = "file://" + f.repo.Dir
	v := f.version("v0", true, false)
	hosts := make([]*host, n)
	for i := range n {
		hosts[i] = f.start(fmt.Sprintf("h%03d", i))
	}
	// waitAll waits until every host is good on rev, fetching again, as
	// its next poll would, on a host whose fetch failed (the git daemon
	// takes 32 connections at once).
	reader, err := fleet.Dial(fleet.Config{Endpoints: f.endpoints, Fleet: f.fleet, RequestTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer reader.Close()
	waitAll := func(rev string, limit time.Duration) {
		b.Helper()
		for deadline := time.Now().Add(limit); ; time.Sleep(100 * time.Millisecond) {
			r, err := reader.Read(context.Background(), "")
			if err != nil {
				if time.Now().After(deadline) {
					b.Fatal(err)
				}
				continue // 100 agents starting on 2 cores: etcd answers late
			}
			good := 0
			for _, h := range r.Hosts {
				if h.LastGood == rev && h.Revision == rev && !h.Stale {
					good++
				}
				if strings.HasPrefix(h.LastError, "source failing") {
					f.hosts[h.Host].fetch()
				}
			}
			if good == n {
				return
			}
			if time.Now().After(deadline) {
				shown := 0
				for _, h := range r.Hosts {
					if h.LastGood != rev && shown < 5 {
						shown++
						b.Logf("%s: on %s, last good %s, %s %s, phase %q, stale %v, %s", h.Host, h.Revision, h.LastGood, h.Sync, h.Health, h.Phase, h.Stale, h.LastError)
						if shown == 1 {
							b.Logf("its log:\n%s", f.hosts[h.Host].log.String())
						}
					}
				}
				b.Fatalf("after %s, %d of %d hosts are good on %s (%d rows)", limit, good, n, rev, len(r.Hosts))
			}
		}
	}
	waitAll(v, 5*time.Minute)

	cli, err := clientv3.New(clientv3.Config{Endpoints: f.endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	kvRev := func() int64 {
		resp, err := cli.Get(context.Background(), "/nothing")
		if err != nil {
			b.Fatal(err)
		}
		return resp.Header.Revision
	}
	slots := "/cortex-sync/" + f.fleet + "/slot/"

	var totals, peaks, writes, proposals, statusWrites []float64
	var lones []string // some writes of a status alone
	cpu0, start := benchstat.CPU(true), time.Now()
	b.ResetTimer()
	for it := range b.N {
		// The slots held at once, from a watch on their keys.
		wctx, wcancel := context.WithCancel(context.Background())
		held, peak := map[string]bool{}, 0
		var mu sync.Mutex
		prefix := "/cortex-sync/" + f.fleet + "/"
		wch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(kvRev()+1))
		watched := make(chan struct{})
		statusOnly := map[int64]bool{} // the writes of a status alone
		byRev := map[int64]string{}    // what each write of a status said
		go func() {
			defer close(watched)
			for resp := range wch {
				mu.Lock()
				for _, ev := range resp.Events {
					key := string(ev.Kv.Key)
					if strings.HasPrefix(key, slots) {
						held[key] = ev.Type == clientv3.EventTypePut
					}
					rev := ev.Kv.ModRevision
					if _, seen := statusOnly[rev]; !seen {
						statusOnly[rev] = true
					}
					statusOnly[rev] = statusOnly[rev] && strings.HasPrefix(key, prefix+"status/")
					if strings.HasPrefix(key, prefix+"status/") {
						byRev[rev] = string(ev.Kv.Value)
					}
				}
				now := 0
				for _, on := range held {
					if on {
						now++
					}
				}
				peak = max(peak, now)
				mu.Unlock()
			}
		}()
		before, committed := kvRev(), cl.Committed()
		v = f.version(fmt.Sprintf("v%d", it+1), true, false)
		t0 := time.Now()
		for _, h := range hosts {
			h.fetch()
		}
		waitAll(v, 5*time.Minute)
		total := time.Since(t0)
		time.Sleep(2 * time.Second) // the debounced writes still on their way
		w := kvRev() - before
		proposals = append(proposals, float64(cl.Committed()-committed)/float64(n))
		wcancel()
		<-watched
		alone := 0
		var lone []string
		mu.Lock()
		for rev, only := range statusOnly {
			if only {
				alone++
				if len(lone) < 3 {
					lone = append(lone, byRev[rev])
				}
			}
		}
		lones = append(lones, lone...)
		mu.Unlock()
		statusWrites = append(statusWrites, float64(alone)/float64(n))
		totals = append(totals, total.Seconds())
		peaks = append(peaks, float64(peak))
		writes = append(writes, float64(w)/float64(n))
		if peak > 10 {
			b.Errorf("peak of slots held %d > maxUnavailable 10", peak)
		}
	}
	b.StopTimer()
	cpu, wall := benchstat.CPU(true)-cpu0, time.Since(start)

	// A change on one host seen in fleet status: a revision it refuses
	// (it does not validate) is its last error, written by the host.
	bad := "main@sha1:" + f.repo.Commit("invalid", map[string]*string{"base/bad.yaml": gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: Nope\nmetadata: {name: x}\n")})
	var lat []time.Duration
	for i := range 10 {
		h := hosts[i*n/10]
		t0 := time.Now()
		h.fetch()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			r, err := reader.Read(context.Background(), "")
			if err != nil {
				b.Fatal(err)
			}
			if i := slices.IndexFunc(r.Hosts, func(r fleet.HostRow) bool { return r.Host == h.name }); i >= 0 && strings.Contains(r.Hosts[i].LastError, bad) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s's refusal of %s not in fleet status after 10s", h.name, bad)
			}
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(benchstat.Mean(totals), "rollout_s")
	b.ReportMetric(slices.Max(peaks), "peak_in_transition")
	b.ReportMetric(benchstat.Mean(writes), "writes/host/rev")
	b.ReportMetric(benchstat.Mean(proposals), "proposals/host/rev")
	b.ReportMetric(benchstat.Mean(statusWrites), "status_alone/host/rev")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "status_p50_ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "status_max_ms")
	b.Logf("%d rollouts of %d agents: %v s; CPU user+sys %.1fs over %.1fs wall (3 etcd members and %d agents in this process, and the supervisors it reaped; the live supervisors and processes not counted); load %s",
		b.N, n, totals, cpu.Seconds(), wall.Seconds(), n, benchstat.Load())
	if len(lones) > 0 {
		b.Logf("writes of a status alone, some:\n%s", strings.Join(lones[:min(3, len(lones))], "\n"))
	}
}
