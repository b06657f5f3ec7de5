package fleet_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// TestThroughGRPCProxy: hosts whose only endpoint is one of two etcd gRPC
// proxies (half on each, as the hosts of two sites would use each its
// own) roll out a revision: presence on leases kept alive through the
// proxies, slots taken and freed through one proxy wake hosts waiting on
// the other, never more than maxUnavailable at once, every host good; and
// fleet status read through a proxy sees every host on the revision.
func TestThroughGRPCProxy(t *testing.T) {
	const n = 12
	cl := etcdtest.Shared(t)
	px := []*etcdtest.GRPCProxy{etcdtest.NewGRPCProxy(t, cl.Endpoints()), etcdtest.NewGRPCProxy(t, cl.Endpoints())}
	name := fleetName(t)
	logs := &lineLog{}
	var ms []*fleet.Member
	for i, p := range px {
		ms = append(ms, joinAll(t, []string{p.URL}, name, i*n/2, n/2, slog.New(logs))...)
	}
	waitPresent(t, ms, 30*time.Second)
	// The members saw every presence: the keys are in etcd, not in a
	// proxy's cache.
	direct := rawClient(t, cl.Endpoints())
	resp, err := direct.Get(context.Background(), "/cortex-sync/"+name+"/presence/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != n {
		t.Fatalf("%d presence keys on the members, want %d", resp.Count, n)
	}

	rev := fleet.Revision{ID: "main@sha1:proxied", Rollout: resource.Rollout{
		MaxUnavailable: resource.IntOrPercent{Value: 3}, MinReady: resource.Duration(300 * time.Millisecond), FailureThreshold: 1}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	r := rollThrough(ctx, ms, rev, 0)
	t.Logf("%d hosts through 2 gRPC proxies: rollout in %.1fs, peak %d of 3 in transition, %d asks", n, time.Since(t0).Seconds(), r.peak, r.asks)
	if r.good != n {
		t.Fatalf("%d of %d hosts good: the rollout through the proxies did not complete; errors: %v", r.good, n, r.errs)
	}
	if r.peak > 3 {
		t.Errorf("peak %d hosts in transition > maxUnavailable 3", r.peak)
	}
	if len(r.errs) > 0 {
		t.Errorf("%d calls failed through the proxies; first: %v", len(r.errs), r.errs[0])
	}
	if l := logs.matching("unreachable"); len(l) > 0 {
		t.Errorf("%d log lines say unreachable; first: %s", len(l), l[0])
	}

	// fleet status through a proxy.
	reader, err := fleet.Dial(fleet.Config{Endpoints: []string{px[1].URL}, Fleet: name})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	for _, m := range ms {
		m.SetStatus(fleet.HostStatus{Revision: rev.ID, Head: rev.ID, Sync: "Synced", Health: "Healthy", LastGood: rev.ID})
	}
	var rep *fleet.Report
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rep, err = reader.Read(context.Background(), rev.ID)
		if err == nil && rep.Converged && len(rep.Hosts) == n {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("fleet status through a proxy: not %d hosts converged on %s after 30s (err %v, report %+v)", n, rev.ID, err, rep)
		}
	}
	for _, h := range rep.Hosts {
		if h.Stale || h.Revision != rev.ID {
			t.Errorf("host %s: stale %v, on %q; want live on %s", h.Host, h.Stale, h.Revision, rev.ID)
		}
	}
}
