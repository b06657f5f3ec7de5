package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func client(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// timed is how long a put and a get of k take.
func timed(t *testing.T, cli *clientv3.Client, k string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	if _, err := cli.Put(ctx, k, "v"); err != nil {
		t.Fatal(err)
	}
	r, err := cli.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("get %s: %v", k, r.Kvs)
	}
	return time.Since(t0)
}

// TestProxyDelay: a request through a delaying proxy takes at least the
// delay both ways; once the delay is set back to zero it takes less.
func TestProxyDelay(t *testing.T) {
	c := New(t)
	p := NewProxy(t, c.Members[0].ClientURL)
	cli := client(t, p.URL)
	timed(t, cli, "warm") // connected
	// A delay long enough that "less than it, once off" holds on a
	// machine with both cores busy.
	const d = time.Second
	p.SetDelay(d)
	if took := timed(t, cli, "slow"); took < 4*d { // a put and a get, each both ways
		t.Errorf("a put and a get through a %s delay took %s, want at least %s", d, took, 4*d)
	}
	p.SetDelay(0)
	timed(t, cli, "drain") // what was sent with the delay arrives
	if took := timed(t, cli, "fast"); took >= 4*d {
		t.Errorf("a put and a get with the delay off took %s", took)
	}
}

// TestGRPCProxy: a client whose only endpoint is the gRPC proxy writes,
// reads, watches and keeps a lease alive through it.
func TestGRPCProxy(t *testing.T) {
	c := New(t)
	p := NewGRPCProxy(t, c.Endpoints())
	cli := client(t, p.URL)
	direct := client(t, c.Endpoints()...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wch := cli.Watch(ctx, "k")
	g, err := cli.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.KeepAlive(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Put(ctx, "k", "v", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-wch:
		if len(r.Events) != 1 || string(r.Events[0].Kv.Value) != "v" {
			t.Fatalf("watch through the proxy: %v", r.Events)
		}
	case <-ctx.Done():
		t.Fatal("no watch event through the proxy")
	}
	time.Sleep(3 * time.Second) // past the lease's TTL: kept alive through the proxy
	r, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 {
		t.Fatal("the key on a lease kept alive through the proxy is gone")
	}
}
