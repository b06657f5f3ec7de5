package fleet

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/internal/benchstat"
	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// BenchmarkRollout100: 100 hosts (each its own etcd client, as 100 agents
// are) on a real 3-member cluster roll out one revision a loop with
// maxUnavailable 10 and minReady 1s. Each host, once admitted, reports
// its status as an agent would (applying, then synced and healthy) and
// its verdict. Reported: the rollout's time, the peak of hosts applying at
// once, etcd writes (KV revisions) per host per revision, and how long a
// status change takes to show in a fleet read. FLEET_BENCH_NOFSYNC=1 runs
// the members without fsync, to tell the disk's share from the rest.
func BenchmarkRollout100(b *testing.B) {
	const n = 100
	cl := etcdtest.NewWith(b, etcdtest.Options{NoFsync: os.Getenv("FLEET_BENCH_NOFSYNC") != ""})
	eps := cl.Endpoints()
	ms := make([]*Member, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := Dial(Config{Endpoints: eps, Fleet: fleetOf(b)})
			if err != nil {
				b.Error(err)
				return
			}
			m, err := Join(c, MemberConfig{Host: resource.Host{Name: fmt.Sprintf("h%03d", i)}})
			if err != nil {
				b.Error(err)
				return
			}
			ms[i] = m
		})
	}
	wg.Wait()
	defer func() {
		for _, m := range ms {
			m.Close()
		}
	}()
	reader := dial(b, eps)
	waitFor(b, 30*time.Second, "100 hosts present", func() bool {
		r, err := reader.Read(context.Background(), "")
		return err == nil && len(r.Hosts) == n
	})
	kvRev := func() int64 {
		resp, err := reader.cli.Get(context.Background(), "/nothing")
		if err != nil {
			b.Fatal(err)
		}
		return resp.Header.Revision
	}
	prev := "main@sha1:0"
	for _, m := range ms {
		m.SetStatus(HostStatus{Revision: prev, Head: prev, Sync: "Synced", Health: "Healthy", LastGood: prev})
	}
	waitFor(b, 30*time.Second, "statuses written", func() bool {
		r, err := reader.Read(context.Background(), prev)
		return err == nil && r.Converged
	})
	var totals, peaks, writes, proposals, statusWrites []float64
	cpu0, start := benchstat.CPU(false), time.Now()
	b.ResetTimer()
	for it := range b.N {
		rev := Revision{ID: fmt.Sprintf("main@sha1:%d", it+1), Rollout: resource.Rollout{
			MaxUnavailable: resource.IntOrPercent{Value: 10}, MinReady: resource.Duration(time.Second), FailureThreshold: 1}}
		before, committed := kvRev(), cl.Committed()
		versions := func() (sum int64) {
			resp, _ := reader.cli.Get(context.Background(), reader.key("status")+"/", clientv3.WithPrefix())
			for _, kv := range resp.Kvs {
				sum += kv.Version
			}
			return sum
		}
		v0 := versions()
		s := &sim{}
		t0 := time.Now()
		var wg sync.WaitGroup
		for _, m := range ms {
			wg.Go(func() {
				// The host fetched rev: it knows its head, waits for a slot.
				m.SetStatus(HostStatus{Revision: prev, Head: rev.ID, HeadTime: t0, Sync: "Synced", Health: "Healthy", LastGood: prev})
				waitAdmit(context.Background(), m, rev)
				s.enter(m.Host())
				m.SetStatus(HostStatus{Revision: rev.ID, Head: rev.ID, HeadTime: t0, Sync: "Synced", Health: "Progressing", LastGood: prev})
				time.Sleep(rev.Rollout.MinReady.Std())
				m.SetStatus(HostStatus{Revision: rev.ID, Head: rev.ID, HeadTime: t0, Sync: "Synced", Health: "Healthy", LastGood: rev.ID})
				s.leave(false)
				if err := m.Good(context.Background(), rev.ID); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		total := time.Since(t0)
		// Quiet: no debounced write may still be on its way.
		time.Sleep(2 * DefaultDebounce)
		w := kvRev() - before
		proposals = append(proposals, float64(cl.Committed()-committed)/n)
		statusWrites = append(statusWrites, float64(versions()-v0)/n)
		totals = append(totals, total.Seconds())
		peaks = append(peaks, float64(s.peak))
		writes = append(writes, float64(w)/n)
		if s.peak > 10 {
			b.Fatalf("peak in transition %d > maxUnavailable 10", s.peak)
		}
		prev = rev.ID
	}
	b.StopTimer()
	cpu := benchstat.CPU(false) - cpu0
	wall := time.Since(start)

	// Status propagation: a change on one host, seen in a fleet read.
	var lat []time.Duration
	for i := range 10 {
		m := ms[i*7]
		want := fmt.Sprintf("probe-%d", i)
		t0 := time.Now()
		m.SetStatus(HostStatus{Revision: prev, Head: prev, Sync: "Synced", Health: "Healthy", LastGood: prev, LastError: want})
		waitFor(b, 10*time.Second, "status seen", func() bool {
			r, err := reader.Read(context.Background(), "")
			return err == nil && row(r, m.Host()).LastError == want
		})
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(benchstat.Mean(totals), "rollout_s")
	b.ReportMetric(slices.Max(peaks), "peak_in_transition")
	b.ReportMetric(benchstat.Mean(writes), "writes/host/rev")
	b.ReportMetric(benchstat.Mean(proposals), "proposals/host/rev")
	b.ReportMetric(benchstat.Mean(statusWrites), "status_writes/host/rev")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "status_p50_ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "status_max_ms")
	b.Logf("%d rollouts of %d hosts: %.1fs each; CPU user+sys %.1fs over %.1fs wall (all 3 members and 100 clients in this process); load %s",
		b.N, n, benchstat.Mean(totals), cpu.Seconds(), wall.Seconds(), benchstat.Load())
}

// BenchmarkSingletonFailover: 20 failovers of a singleton among three
// hosts, the holder's client killed each time: the worst overlap of two
// holders (0) and the failover time (TTL 2s).
func BenchmarkSingletonFailover(b *testing.B) {
	for range b.N {
		cpu0 := benchstat.CPU(false)
		worst, fo := singletonFailovers(b, "kill", 20)
		slices.Sort(fo)
		b.ReportMetric(float64(worst.Milliseconds()), "overlap_ms")
		b.ReportMetric(float64(fo[len(fo)/2].Milliseconds()), "failover_p50_ms")
		b.ReportMetric(float64(fo[len(fo)-1].Milliseconds()), "failover_max_ms")
		b.Logf("20 failovers: CPU user+sys %.1fs; load %s", (benchstat.CPU(false) - cpu0).Seconds(), benchstat.Load())
	}
}
