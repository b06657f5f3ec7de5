// Package etcdtest runs a real etcd cluster inside a test: three members
// (or any number) of go.etcd.io/etcd/server/v3/embed on 127.0.0.1, random
// ports, a data dir per member under t.TempDir(). Members stop and start
// one at a time or all at once, and a client link can be cut with a proxy,
// so the fleet code meets the real thing, never a fake.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Cluster is a running etcd cluster of real members.
type Cluster struct {
	t       testing.TB
	Members []*Member
}

// Member is one etcd member; Stop and Start keep its data dir and ports.
type Member struct {
	Name       string
	ClientURL  string // http://127.0.0.1:PORT
	cfg        *embed.Config
	mu         sync.Mutex
	etcd       *embed.Etcd
	startCount int
}

// Options shape a cluster; the zero value is three members with etcd's
// default tick (100 ms) and election timeout (1 s).
type Options struct {
	Members int
	// NoFsync trades durability for speed: for benchmarks of many writes
	// on a shared disk. Stopping and starting members needs fsync.
	NoFsync bool
}

// New starts a cluster of three members and stops it when the test ends.
func New(t testing.TB) *Cluster { return NewWith(t, Options{}) }

var shared struct {
	once sync.Once
	c    *Cluster
	dir  string
	err  error
}

// Shared is one cluster of three members for every test of the package
// that neither stops nor cuts its members (each keeps to keys of its own):
// it starts with the first test that asks and stops in StopShared.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "etcdtest-"); shared.err != nil {
			return
		}
		for try := 0; try < 3; try++ {
			if shared.c, shared.err = startIn(nil, shared.dir, 3, Options{}); shared.err == nil {
				return
			}
		}
	})
	if shared.err != nil {
		t.Fatalf("start the shared etcd cluster: %v", shared.err)
	}
	return shared.c
}

// StopShared stops the shared cluster, if one started, and removes its
// data: from TestMain, after the tests.
func StopShared() {
	if shared.c != nil {
		shared.c.StopAll()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
}

// NewWith starts a cluster shaped by o.
func NewWith(t testing.TB, o Options) *Cluster {
	t.Helper()
	n := o.Members
	if n == 0 {
		n = 3
	}
	var lastErr error
	for try := 0; try < 3; try++ { // a port taken between probe and bind: try new ones
		c, err := start(t, n, o)
		if err == nil {
			t.Cleanup(c.StopAll)
			return c
		}
		lastErr = err
	}
	t.Fatalf("start etcd cluster: %v", lastErr)
	return nil
}

func start(t testing.TB, n int, o Options) (*Cluster, error) {
	return startIn(t, t.TempDir(), n, o)
}

func startIn(t testing.TB, base string, n int, o Options) (*Cluster, error) {
	c := &Cluster{t: t}
	var initial []string
	for i := range n {
		peer, client := freePort(), freePort()
		m := &Member{Name: fmt.Sprintf("m%d", i), ClientURL: "http://" + client}
		cfg := embed.NewConfig()
		cfg.Name = m.Name
		cfg.Dir = filepath.Join(base, m.Name)
		pu, _ := url.Parse("http://" + peer)
		cu, _ := url.Parse(m.ClientURL)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.InitialClusterToken = "etcdtest"
		cfg.LogLevel = "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.UnsafeNoFsync = o.NoFsync
		m.cfg = cfg
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+pu.String())
	}
	for _, m := range c.Members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
	}
	// Members wait for each other: start them together.
	errs := make(chan error, n)
	for _, m := range c.Members {
		go func() { errs <- m.start() }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		c.StopAll()
		return nil, first
	}
	return c, nil
}

// freePort is a port on 127.0.0.1 that was free a moment ago.
func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.etcd != nil {
		return nil
	}
	if m.startCount > 0 {
		m.cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	e, err := embed.StartEtcd(m.cfg)
	if err != nil {
		return fmt.Errorf("member %s: %w", m.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return fmt.Errorf("member %s: not ready after 30s", m.Name)
	}
	m.etcd = e
	m.startCount++
	return nil
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.ClientURL
	}
	return out
}

// Stop stops member i, keeping its data.
func (c *Cluster) Stop(i int) { c.Members[i].Stop() }

// Start starts member i again after Stop. With the others down it waits
// for them (a lone member of three has no quorum): use StartAll.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	if err := c.Members[i].start(); err != nil {
		c.t.Fatal(err)
	}
}

// StopAll stops every member.
func (c *Cluster) StopAll() {
	for _, m := range c.Members {
		m.Stop()
	}
}

// StartAll starts every stopped member, together, as a cluster needs.
func (c *Cluster) StartAll() {
	c.t.Helper()
	errs := make(chan error, len(c.Members))
	for _, m := range c.Members {
		go func() { errs <- m.start() }()
	}
	for range c.Members {
		if err := <-errs; err != nil {
			c.t.Fatal(err)
		}
	}
}

// Stop stops the member, keeping its data dir and ports.
func (m *Member) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.etcd == nil {
		return
	}
	m.etcd.Close()
	m.etcd = nil
}

// Leader is the index of the member that leads, or -1.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		m.mu.Lock()
		e := m.etcd
		m.mu.Unlock()
		if e != nil && e.Server.Leader() == e.Server.MemberID() {
			return i
		}
	}
	return -1
}

// Proxy is a TCP proxy in front of one address that can be cut: a client
// link partition (packets dropped both ways, connections kept open, as a
// pulled cable looks to both ends), and healed. It can also be slowed:
// each direction delayed by a latency (SetDelay), an etcd that answers
// slowly.
type Proxy struct {
	URL   string // http://127.0.0.1:PORT, to give a client as an endpoint
	l     net.Listener
	to    string
	mu    sync.Mutex
	cut   bool
	delay time.Duration
	wg    sync.WaitGroup
	open  []net.Conn
}

// NewProxy proxies to the host:port of target (a client URL) and closes
// when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{URL: "http://" + l.Addr().String(), l: l, to: u.Host}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// ProxyAll puts a proxy in front of every member.
func (c *Cluster) ProxyAll(t testing.TB) []*Proxy {
	out := make([]*Proxy, len(c.Members))
	for i, m := range c.Members {
		out[i] = NewProxy(t, m.ClientURL)
	}
	return out
}

// URLs are the proxies' URLs.
func URLs(ps []*Proxy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.URL
	}
	return out
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.to)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.open = append(p.open, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

// chunk is what a pipe read, and when it is due at the other end.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst: what it reads is due the delay later (in order,
// without holding back what follows: a latency, not a bandwidth); while
// cut, it is dropped.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 1024)
	p.wg.Add(1)
	go p.deliver(dst, src, q)
	defer close(q)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut, delay := p.cut, p.delay
			p.mu.Unlock()
			if !cut {
				q <- chunk{b: buf[:n], due: time.Now().Add(delay)}
			}
		}
		if err != nil {
			return
		}
	}
}

// deliver writes each chunk to dst when it is due; dst is closed once src
// ended and everything read before was delivered.
func (p *Proxy) deliver(dst, src net.Conn, q <-chan chunk) {
	defer p.wg.Done()
	defer dst.Close()
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(c.b); err != nil {
			src.Close() // the other end is gone: end the reader too
			for range q {
			}
			return
		}
	}
}

// SetDelay delays each direction by d from now on (what was read before
// keeps its due time): every answer of etcd through the proxy comes at
// least 2d after its request. Zero lets traffic through at once again.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Cut drops everything both ways from now on, keeping connections open.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
}

// Heal lets traffic through again. Bytes dropped while cut are gone, so a
// gRPC stream that lost some breaks: the client redials, as after a real
// partition.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	for _, c := range p.open {
		c.Close() // a stream with holes in it is no stream
	}
	p.open = nil
	p.mu.Unlock()
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() {
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.open {
		c.Close()
	}
	p.open = nil
	p.mu.Unlock()
	p.wg.Wait()
}
