package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
)

func revN(i int) string { return fmt.Sprintf("main@sha1:%040d", i) }

// roll takes every host through rev: a slot each, then a verdict (bad
// for the hosts in bad, with why). The first host records the spec, and
// so folds what is over.
func roll(t *testing.T, ms []*Member, id string, bad map[string]string) {
	t.Helper()
	ctx := context.Background()
	rev := Revision{ID: id, Rollout: rollout("3", 0, 10, 0)}
	for _, m := range ms {
		if d, err := m.Admit(ctx, rev); err != nil || !d.Go {
			t.Fatalf("%s admitted to %s: %+v %v", m.Host(), id, d, err)
		}
	}
	for _, m := range ms {
		var err error
		if why, ok := bad[m.Host()]; ok {
			err = m.Bad(ctx, id, why)
		} else {
			err = m.Good(ctx, id)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// records counts the keys of rev's rollout.
func records(t *testing.T, c *Client, rev string) int64 {
	t.Helper()
	n, err := c.count(context.Background(), 0, c.key("rollout", revKey(rev))+"/")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFolded waits until rev's rollout is folded: a summary, no records.
func waitFolded(t *testing.T, c *Client, rev string) *FoldedError {
	t.Helper()
	var fe *FoldedError
	waitFor(t, 10*time.Second, rev+" folded", func() bool {
		return errors.As(c.Folded(context.Background(), rev), &fe) && records(t, c, rev) == 0
	})
	return fe
}

// K+2 rollouts: the two oldest are folded into summaries by the hosts
// that started the newer ones, their records gone; the summaries say
// what happened; verbs on them say they were folded; a host that still
// asks for a folded revision is refused and starts no new rollout of it.
func TestFoldOldRollouts(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 3)
	c := dial(t, cl.Endpoints())
	ctx := context.Background()
	for i := 1; i <= KeepRollouts+2; i++ {
		bad := map[string]string{}
		if i == 2 {
			bad["h02"] = "Process/web: readiness failed"
		}
		roll(t, ms, revN(i), bad)
	}
	s1, s2 := waitFolded(t, c, revN(1)).Summary, waitFolded(t, c, revN(2)).Summary
	if s1.State != SummaryComplete || s1.Good != 3 || s1.Bad != 0 || s1.StartedBy != "h00" || s1.FoldedBy != "h00" || s1.Started.IsZero() || s1.Completed.Before(s1.Started) {
		t.Errorf("summary of a complete rollout: %+v", s1)
	}
	if s2.State != SummarySuperseded || s2.Good != 2 || s2.Bad != 1 || len(s2.BadHosts) != 1 || s2.BadHosts[0] != (BadHost{"h02", "Process/web: readiness failed"}) {
		t.Errorf("summary of a rollout with a bad host: %+v", s2)
	}
	r := read(t, c, "")
	if len(r.Rollouts) != KeepRollouts || r.Rollouts[0].Revision != revN(3) || !r.Rollouts[KeepRollouts-1].Newest {
		t.Fatalf("rollouts after the folds: %+v", r.Rollouts)
	}
	for i := 3; i <= KeepRollouts+2; i++ {
		if err := c.Folded(ctx, revN(i)); err != nil || records(t, c, revN(i)) == 0 {
			t.Errorf("rollout %d of the newest %d folded: %v", i, KeepRollouts, err)
		}
	}
	if n, revs, err := c.FoldedCount(ctx, 5); err != nil || n != 2 || len(revs) != 2 || revs[0] != revN(2) {
		t.Errorf("folded count: %d %v %v", n, revs, err)
	}

	// Verbs on a folded rollout say so, with its summary.
	for _, state := range []string{StatePaused, StateActive, StateAborted} {
		_, err := c.SetRollout(ctx, revN(2), state, "ops", "")
		if !errors.Is(err, ErrFolded) || !strings.Contains(err.Error(), "is over and folded") || !strings.Contains(err.Error(), "h02 (Process/web: readiness failed)") {
			t.Errorf("%s of a folded rollout: %v", state, err)
		}
	}
	if err := c.OverrideWindow(ctx, revN(1), "ops", ""); !errors.Is(err, ErrFolded) {
		t.Errorf("override-window of a folded rollout: %v", err)
	}
	// A host that still asks for a folded revision is refused; no new
	// rollout of it starts.
	if d, err := ms[1].Admit(ctx, Revision{ID: revN(1), Rollout: rollout("3", 0, 10, 0)}); err != nil || d.Go || d.Wait != WaitStopped || !strings.Contains(d.Why, "folded") {
		t.Fatalf("admitted to a folded rollout: %+v %v", d, err)
	}
	if n := records(t, c, revN(1)); n != 0 {
		t.Fatalf("a folded rollout has %d records again", n)
	}
}

// A host that read a rollout before it was folded, and asks for its slot
// after, is refused by etcd: the slot's transaction compares the summary
// key's absence, and no slot of a folded rollout is taken.
func TestFoldRacesATake(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 2)
	c := dial(t, cl.Endpoints())
	ctx := context.Background()
	for i := 1; i <= KeepRollouts; i++ {
		roll(t, ms[:1], revN(i), nil)
	}
	r1 := Revision{ID: revN(1), Rollout: rollout("3", 0, 10, 0)}
	v, err := ms[1].readAdmit(ctx, r1.ID, ms[1].Host())
	if err != nil || v.folded || v.spec == nil {
		t.Fatalf("r1 before its fold: %+v %v", v, err)
	}
	roll(t, ms[:1], revN(KeepRollouts+1), nil)
	waitFolded(t, c, r1.ID)
	if won, err := ms[1].take(ctx, v, r1, v.free(r1.Rollout, 0)[0], 0); err != nil || won {
		t.Fatalf("a slot of a folded rollout taken: %v %v", won, err)
	}
}

// A rollout a host holds a slot on, a paused one, and the newest
// complete one are never folded; aborted, a paused one is.
func TestFoldKeepsWhatIsNotOver(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 3)
	c := dial(t, cl.Endpoints())
	ctx := context.Background()
	two := ms[:2]
	roll(t, two, revN(1), nil)
	// h02 takes r1's slot and keeps it: in progress.
	if d, err := ms[2].Admit(ctx, Revision{ID: revN(1), Rollout: rollout("3", 0, 10, 0)}); err != nil || !d.Go {
		t.Fatal(d, err)
	}
	roll(t, two, revN(2), nil)
	if _, err := c.SetRollout(ctx, revN(2), StatePaused, "ops", "look first"); err != nil {
		t.Fatal(err)
	}
	for i := 3; i <= KeepRollouts+3; i++ {
		roll(t, two, revN(i), nil)
	}
	waitFolded(t, c, revN(3)) // superseded: two of three hosts good on it
	if err := c.Folded(ctx, revN(1)); err != nil || records(t, c, revN(1)) == 0 {
		t.Fatalf("a rollout in progress was folded: %v", err)
	}
	if err := c.Folded(ctx, revN(2)); err != nil || records(t, c, revN(2)) == 0 {
		t.Fatalf("a paused rollout was folded: %v", err)
	}
	// h02 is good on r1: r1 is complete, the newest complete rollout,
	// the one a rollback of the fleet goes back to: kept.
	if err := ms[2].Good(ctx, revN(1)); err != nil {
		t.Fatal(err)
	}
	if folded, err := c.Fold(ctx, "ops"); err != nil || len(folded) != 0 {
		t.Fatalf("fold with the newest complete rollout beyond the newest %d: %v %v", KeepRollouts, folded, err)
	}
	if err := c.Folded(ctx, revN(1)); err != nil || records(t, c, revN(1)) == 0 {
		t.Fatalf("the newest complete rollout was folded: %v", err)
	}
	// Aborted, the paused one is over.
	if _, err := c.SetRollout(ctx, revN(2), StateAborted, "ops", "superseded by the fix"); err != nil {
		t.Fatal(err)
	}
	if folded, err := c.Fold(ctx, "ops"); err != nil || len(folded) != 1 || folded[0] != revN(2) {
		t.Fatalf("fold of an aborted rollout: %v %v", folded, err)
	}
	s := waitFolded(t, c, revN(2)).Summary
	if s.State != StateAborted || !strings.Contains(s.Why, "aborted by ops") || s.FoldedBy != "ops" || s.Completed.IsZero() {
		t.Fatalf("summary of an aborted rollout: %+v", s)
	}
}

// A rollout of more records than etcd takes in one transaction (128
// operations by default) is folded in several.
func TestFoldBatches(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 1)
	c := dial(t, cl.Endpoints())
	ctx := context.Background()
	roll(t, ms, revN(1), nil)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	doc, _ := json.Marshal(verdictDoc{Schema: Schema, At: time.Now().UTC()})
	const many = 250
	for i := 0; i < many; i += 50 {
		var ops []clientv3.Op
		for j := i; j < i+50; j++ {
			ops = append(ops, clientv3.OpPut(c.key("rollout", revKey(revN(1)), "good", fmt.Sprintf("g%03d", j)), string(doc)))
		}
		if _, err := c.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 2; i <= KeepRollouts+1; i++ {
		roll(t, ms, revN(i), nil)
	}
	if s := waitFolded(t, c, revN(1)).Summary; s.Good != many+1 || s.State != SummaryComplete {
		t.Fatalf("summary of a rollout of %d records: %+v", many+2, s)
	}
}

// dialCounting is a client of the test fleet that counts the bytes of
// etcd's answers.
func dialCounting(t testing.TB, endpoints []string) (*Client, *atomic.Int64) {
	t.Helper()
	c := dial(t, endpoints)
	var n atomic.Int64
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			n.Add(int64(wireSize(t, reply)))
			return err
		})}})
	if err != nil {
		t.Fatal(err)
	}
	c.cli.Close()
	c.cli = cli
	return c, &n
}

// wireSize is the size of a gRPC message as sent.
func wireSize(t testing.TB, msg any) int {
	b, err := encoding.GetCodecV2("proto").Marshal(msg)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer b.Free()
	return b.Len()
}

// fleet status reads the same bytes after 4 rollouts and after 12: the
// old ones are folded and it reads neither their summaries nor keys it
// does not show (a singleton's data, window overrides).
func TestFleetStatusReadStaysFlat(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 3)
	c, n := dialCounting(t, cl.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	measure := func(rollouts int) int64 {
		waitFor(t, 10*time.Second, "the old rollouts folded", func() bool {
			k, _, err := c.FoldedCount(ctx, 1)
			return err == nil && k == rollouts-KeepRollouts
		})
		for _, m := range ms {
			m.SetStatus(HostStatus{Revision: revN(rollouts), Head: revN(rollouts), Sync: "Synced", Health: "Healthy", LastGood: revN(rollouts)})
		}
		waitFor(t, 5*time.Second, "statuses written", func() bool { return read(t, c, "").Converged })
		before := n.Load()
		r := read(t, c, "")
		if len(r.Rollouts) != KeepRollouts || len(r.Hosts) != 3 {
			t.Fatalf("after %d rollouts: %+v", rollouts, r)
		}
		return n.Load() - before
	}
	for i := 1; i <= 4; i++ {
		roll(t, ms, revN(i), nil)
	}
	at4 := measure(4)
	for i := 5; i <= 12; i++ {
		roll(t, ms, revN(i), nil)
	}
	big := strings.Repeat("x", 50<<10)
	for i := range 4 {
		if _, err := c.cli.Put(ctx, c.key("singleton-data", "reports", fmt.Sprint(i)), big); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.OverrideWindow(ctx, revN(12), "ops", ""); err != nil {
		t.Fatal(err)
	}
	at12 := measure(12)
	whole, err := c.cli.Get(ctx, c.prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fleet status read %d bytes after 4 rollouts, %d after 12 (the whole prefix: %d bytes, %d keys)", at4, at12, wireSize(t, (*etcdserverpb.RangeResponse)(whole)), whole.Count)
	if at12 > at4+at4/10 {
		t.Fatalf("fleet status read %d bytes after 12 rollouts, %d after 4", at12, at4)
	}
}

// BenchmarkFoldAndRead: a fleet of FLEET_GC_HOSTS hosts (default 1,000;
// their presence, status and verdicts written as the hosts would, not by
// N clients) through 12 rollouts, each folded as the next starts: what a
// fold costs, and what fleet status reads after 4 rollouts and after 12,
// beside the bytes of one rollout's records, which a read of the whole
// prefix got more with each rollout.
func BenchmarkFoldAndRead(b *testing.B) {
	n := 1000
	if s := os.Getenv("FLEET_GC_HOSTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for b.Loop() {
		cl := etcdtest.Shared(b)
		c, bytes := dialCounting(b, cl.Endpoints())
		c.cfg.Fleet = fmt.Sprintf("%s-%d", c.cfg.Fleet, time.Now().UnixNano())
		c.prefix = "/cortex-sync/" + c.cfg.Fleet + "/"
		ctx := context.Background()
		lease, err := c.cli.Grant(ctx, 600)
		if err != nil {
			b.Fatal(err)
		}
		put := func(kvs map[string]string, opts ...clientv3.OpOption) {
			var ops []clientv3.Op
			flush := func() {
				if _, err := c.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					b.Fatal(err)
				}
				ops = ops[:0]
			}
			for k, v := range kvs {
				if ops = append(ops, clientv3.OpPut(k, v, opts...)); len(ops) == 100 {
					flush()
				}
			}
			if len(ops) > 0 {
				flush()
			}
		}
		presence, status := map[string]string{}, map[string]string{}
		host := func(i int) string { return fmt.Sprintf("host-%05d", i) }
		for i := range n {
			presence[c.key("presence", host(i))] = `{"host":"` + host(i) + `"}`
		}
		put(presence, clientv3.WithLease(lease.ID))
		var at4 int64
		var foldTime time.Duration
		for r := 1; r <= 12; r++ {
			id := revN(r)
			spec, _ := json.Marshal(specDoc{Schema: Schema, Revision: id, Rollout: rollout("10%", 0, 1, time.Second), By: host(0), At: time.Now().UTC()})
			put(map[string]string{c.key("rollout", revKey(id), "spec"): string(spec)})
			t0 := time.Now()
			if _, err := c.Fold(ctx, host(0)); err != nil {
				b.Fatal(err)
			}
			foldTime += time.Since(t0)
			good := map[string]string{}
			doc, _ := json.Marshal(verdictDoc{Schema: Schema, At: time.Now().UTC()})
			for i := range n {
				good[c.key("rollout", revKey(id), "good", host(i))] = string(doc)
				s, _ := json.Marshal(HostStatus{Schema: Schema, Host: host(i), Revision: id, Head: id, Sync: "Synced", Health: "Healthy", LastGood: id, RolloutPhase: PhaseGood, Time: time.Now().UTC()})
				status[c.key("status", host(i))] = string(s)
			}
			put(good)
			put(status)
			if r == 4 || r == 12 {
				before := bytes.Load()
				rep, err := c.Read(ctx, "")
				if err != nil || len(rep.Hosts) != n || !rep.Converged {
					b.Fatalf("read after %d rollouts: %v", r, err)
				}
				if r == 4 {
					at4 = bytes.Load() - before
					continue
				}
				at12 := bytes.Load() - before
				whole, err := c.cli.Get(ctx, c.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithCountOnly())
				if err != nil {
					b.Fatal(err)
				}
				one, err := c.cli.Get(ctx, c.key("rollout", revKey(id))+"/", clientv3.WithPrefix())
				if err != nil {
					b.Fatal(err)
				}
				// What an unbounded read got more per rollout.
				b.ReportMetric(float64(wireSize(b, (*etcdserverpb.RangeResponse)(one))), "bytes/rollout")
				b.ReportMetric(float64(at4), "read-bytes@4")
				b.ReportMetric(float64(at12), "read-bytes@12")
				b.ReportMetric(float64(whole.Count), "keys@12")
				b.ReportMetric(foldTime.Seconds()/9, "s/fold")
			}
		}
		c.cli.Revoke(ctx, lease.ID)
	}
}
