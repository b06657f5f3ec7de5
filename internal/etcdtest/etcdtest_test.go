package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestClusterStopStart(t *testing.T) {
	c := New(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(k string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cli.Put(ctx, k, "v")
		return err
	}
	if err := put("a"); err != nil {
		t.Fatal(err)
	}
	c.Stop(c.Leader())
	if err := put("b"); err != nil {
		t.Fatalf("two of three members: %v", err)
	}
	c.StopAll()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err = cli.Get(ctx, "a")
	cancel()
	if err == nil {
		t.Fatal("read with every member down succeeded")
	}
	c.StartAll()
	if err := put("c"); err != nil {
		t.Fatalf("after StartAll: %v", err)
	}
}
