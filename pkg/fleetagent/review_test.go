package fleetagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// A host queued for R whose next fetched revision needs no slot (a revert
// to what it runs: it changes nothing here) stops asking for R, but keeps
// its place in the queue while it lives: every host behind it waits for
// ever, with the slots free.
func TestReviewQueuedHostThatStopsAskingBlocksNoOne(t *testing.T) {
	cl := etcdtest.Shared(t)
	name := "test-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	links := make([]*Link, 3)
	for i := range links {
		l, err := New(Options{Config: fleet.Config{Endpoints: cl.Endpoints(), Fleet: name, RequestTimeout: 2 * time.Second},
			Host: resource.Host{Name: fmt.Sprintf("h%d", i)}, StateDir: t.TempDir(), PresenceTTL: 2 * time.Second, Debounce: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(context.Background()) })
		links[i] = l
	}
	mu, _ := resource.ParseIntOrPercent("1")
	ro := &resource.Rollout{MaxUnavailable: mu, FailureThreshold: 1}
	const r1, r2 = "main@sha1:1", "main@sha1:2"
	for _, l := range links {
		l.Fetched(agent.Fetched{Revision: r1, Fleet: name, Rollout: ro, Changes: true})
	}
	ctx := context.Background()
	admit := func(l *Link, rev string) error {
		var err error
		for range 100 { // until the host holds its slot lease
			if err = l.Admit(ctx, rev); err == nil || errors.Is(err, ErrWaiting) {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return err
	}
	if err := admit(links[0], r1); err != nil {
		t.Fatalf("h0: %v", err)
	}
	for _, l := range links[1:] { // h1, then h2, queue
		if err := admit(l, r1); !errors.Is(err, ErrWaiting) {
			t.Fatalf("queued: %v", err)
		}
	}
	// h1 fetches a revision that changes nothing on it: it no longer
	// waits for r1.
	links[1].Fetched(agent.Fetched{Revision: r2, Fleet: name, Rollout: ro, Changes: false})
	if err := links[1].Admit(ctx, r2); err != nil {
		t.Fatal(err)
	}
	links[0].Judged(r1, state.Good, "") // the slot frees
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = links[2].Admit(ctx, r1); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	cli, cerr := clientv3.New(clientv3.Config{Endpoints: cl.Endpoints(), DialTimeout: 5 * time.Second})
	if cerr != nil {
		t.Fatal(cerr)
	}
	defer cli.Close()
	q, _ := cli.Get(ctx, "/cortex-sync/"+name+"/queue/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	var keys []string
	for _, kv := range q.Kvs {
		keys = append(keys, string(kv.Key))
	}
	t.Fatalf("h2 waits for ever with the slot free, behind a host that asks no more (queue: %v): %v", keys, err)
}
