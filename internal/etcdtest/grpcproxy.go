package etcdtest

import (
	"net"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// GRPCProxy is etcd's gRPC proxy (go.etcd.io/etcd/server/v3/proxy/grpcproxy,
// what `etcd grpc-proxy start` runs) in this process, in front of
// endpoints: its KV, Watch, Lease, Cluster and Maintenance services on
// one port. Clients connected to it share its one connection to the
// members; identical watches are coalesced into one watch on a member,
// and keep-alives of every lease go out on the proxy's own streams.
type GRPCProxy struct {
	URL string // http://127.0.0.1:PORT, to give a client as an endpoint
	cli *clientv3.Client
	srv *grpc.Server
}

// NewGRPCProxy starts a gRPC proxy in front of endpoints (the members'
// client URLs) and stops it when the test ends.
func NewGRPCProxy(t testing.TB, endpoints []string) *GRPCProxy {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cli.Close()
		t.Fatal(err)
	}
	lg := zap.NewNop()
	kvp, _ := grpcproxy.NewKvProxy(cli)
	watchp, _ := grpcproxy.NewWatchProxy(cli.Ctx(), lg, cli)
	clusterp, _ := grpcproxy.NewClusterProxy(lg, cli, l.Addr().String(), "")
	leasep, _ := grpcproxy.NewLeaseProxy(cli.Ctx(), cli)
	srv := grpc.NewServer()
	pb.RegisterKVServer(srv, kvp)
	pb.RegisterWatchServer(srv, watchp)
	pb.RegisterClusterServer(srv, clusterp)
	pb.RegisterLeaseServer(srv, leasep)
	pb.RegisterMaintenanceServer(srv, grpcproxy.NewMaintenanceProxy(cli))
	p := &GRPCProxy{URL: "http://" + l.Addr().String(), cli: cli, srv: srv}
	go srv.Serve(l)
	t.Cleanup(p.Close)
	return p
}

// Close stops the proxy: its clients' streams end, as when a proxy
// process stops.
func (p *GRPCProxy) Close() {
	p.srv.Stop()
	p.cli.Close()
}
