// Package fleet coordinates the hosts of a fleet through etcd: presence on
// a lease, one status key per host, rollouts of a revision in waves that
// the hosts drive themselves with transactions, per-host holds, and
// singletons elected with etcd's concurrency package and fenced on the
// holder's own clock. etcd is the only consensus; every call is bounded
// and fails fast, as a typed error, while it cannot be reached.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// Config is how to reach etcd and which fleet to work in.
type Config struct {
	Endpoints []string // client URLs of the etcd members
	// CertFile and KeyFile are the client certificate and key, CAFile the
	// CA that signed the members' certificates (PEM files).
	CertFile, KeyFile, CAFile string
	// DialTimeout bounds connecting (default 5 s).
	DialTimeout time.Duration
	// RequestTimeout bounds every call (default 3 s).
	RequestTimeout time.Duration
	// Fleet names the fleet: every key lives below /cortex-sync/FLEET/.
	Fleet string
	Log   *slog.Logger
}

// Default timeouts.
const (
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 3 * time.Second
)

// Client is a connection to a fleet's keys: what the CLI reads and
// writes. A host uses a Member, which is a Client that is present.
type Client struct {
	cfg    Config
	cli    *clientv3.Client
	prefix string
	log    *slog.Logger

	mu        sync.Mutex
	downSince time.Time // zero while etcd answers
	lastErr   error
	lastProbe time.Time
	// slow is how many times the request timeout is doubled: etcd
	// answered late while the connection was up. slowSince is when that
	// began (zero while etcd answers in time).
	slow      int
	slowSince time.Time
	logged    map[string]int64 // ignored records logged: key → mod revision
}

// ErrUnreachable is wrapped by every error of a call that etcd did not
// answer: the coordinator is down or cut off.
var ErrUnreachable = errors.New("coordinator unreachable")

// UnreachableError says since when etcd has not answered.
type UnreachableError struct {
	Endpoints []string
	Since     time.Time
	Err       error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("coordinator unreachable since %s: etcd at %s did not answer (%v); check that the members run and this host reaches them",
		e.Since.Format(time.RFC3339), strings.Join(e.Endpoints, ","), e.Err)
}

func (e *UnreachableError) Unwrap() []error { return []error{ErrUnreachable, e.Err} }

// Dial connects to etcd. It does not wait for a member to answer: a host
// starts with etcd down, and calls fail fast until it is back.
func Dial(cfg Config) (*Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("no etcd endpoints: give --etcd-endpoints (etcdEndpoints in the Agent config)")
	}
	if err := checkName(cfg.Fleet); err != nil {
		return nil, fmt.Errorf("--fleet %q: %w", cfg.Fleet, err)
	}
	for _, ep := range cfg.Endpoints {
		if u, err := url.Parse(ep); err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
			return nil, fmt.Errorf("etcd endpoint %q: write a client URL such as https://etcd1.example.com:2379", ep)
		}
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	ec := clientv3.Config{
		Endpoints: cfg.Endpoints, DialTimeout: cfg.DialTimeout, Logger: zap.NewNop(),
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" || cfg.CAFile != "" {
		if (cfg.CertFile == "") != (cfg.KeyFile == "") {
			return nil, errors.New("etcd client TLS: give both --etcd-cert-file and --etcd-key-file, or neither")
		}
		tc, err := transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TrustedCAFile: cfg.CAFile}.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd client TLS (--etcd-cert-file, --etcd-key-file, --etcd-ca-file): %w", err)
		}
		ec.TLS = tc
	}
	cli, err := clientv3.New(ec)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	return &Client{cfg: cfg, cli: cli, prefix: "/cortex-sync/" + cfg.Fleet + "/", log: cfg.Log}, nil
}

// checkName refuses a fleet or host name that would not make one key part.
func checkName(n string) error {
	if n == "" {
		return errors.New("is empty; name the fleet (default: metadata.name of fleet.yaml)")
	}
	if strings.ContainsAny(n, "/\x00") || n == "." || n == ".." {
		return errors.New("must not hold '/' or NUL, nor be '.' or '..'")
	}
	if len(n) > maxNameBytes {
		return fmt.Errorf("is %d bytes long; at most %d", len(n), maxNameBytes)
	}
	if !printable(n) {
		return errors.New("must be printable UTF-8 text, without control characters")
	}
	return nil
}

// Close closes the connection. It revokes nothing: keys on a lease go
// when the lease expires, as after a crash.
func (c *Client) Close() error { return c.cli.Close() }

// Fleet is the fleet's name.
func (c *Client) Fleet() string { return c.cfg.Fleet }

// Condition is "" while etcd answers, else what a host shows: since when
// the coordinator has been unreachable and why.
func (c *Client) Condition() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.downSince.IsZero() {
		return ""
	}
	return (&UnreachableError{Endpoints: c.cfg.Endpoints, Since: c.downSince, Err: c.lastErr}).Error()
}

// probeEvery is how often a call tries etcd while it is known down; the
// calls in between fail at once.
const probeEvery = time.Second

// maxSlow bounds the doublings of the request timeout for a slow etcd:
// 3 s becomes at most 24 s.
const maxSlow = 3

// call runs fn with the request timeout, keeping track of whether etcd
// answers. While etcd is known down, calls fail at once (one a second
// tries again), so nothing waits on a dead coordinator. Slow is not down:
// a call that timed out while the connection to etcd is up (its gRPC
// keep-alives answered) is slow; it is tried again with twice the
// timeout, up to maxSlow doublings, and the client says it is slow
// (Slow) without marking etcd unreachable.
func (c *Client) call(ctx context.Context, fn func(ctx context.Context) error) error {
	c.mu.Lock()
	if !c.downSince.IsZero() && time.Since(c.lastProbe) < probeEvery {
		err := &UnreachableError{Endpoints: c.cfg.Endpoints, Since: c.downSince, Err: c.lastErr}
		c.mu.Unlock()
		return err
	}
	c.lastProbe = time.Now()
	slow := c.slow
	c.mu.Unlock()
	for {
		timeout := c.cfg.RequestTimeout << slow
		t0 := time.Now()
		// A member without a leader answers at once (ErrNoLeader) rather
		// than hold the request: lost quorum is unreachable, not slow.
		cctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), timeout)
		err := fn(cctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err() // the caller gave up: says nothing of etcd
		}
		if err == nil || !unreachable(err) {
			c.answered(time.Since(t0), timeout)
			return err
		}
		if c.connected() && slow < maxSlow {
			slow = c.slower(slow)
			continue
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.downSince.IsZero() {
			c.downSince = time.Now()
			c.log.Warn("coordinator unreachable", "endpoints", strings.Join(c.cfg.Endpoints, ","), "error", err)
		}
		c.lastErr = err
		return &UnreachableError{Endpoints: c.cfg.Endpoints, Since: c.downSince, Err: err}
	}
}

// answered records a call etcd answered in took: it clears the down
// mark, and a slow mark once calls take less than a quarter of the
// timeout again.
func (c *Client) answered(took, timeout time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.downSince, c.lastErr = time.Time{}, nil
	if c.slow > 0 && took < timeout/4 {
		c.slow--
		if c.slow == 0 {
			c.slowSince = time.Time{}
			c.log.Info("coordinator answers in time again")
		}
	}
}

// slower doubles the timeout after a call that timed out on a live
// connection, and returns the new doubling.
func (c *Client) slower(tried int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slow <= tried {
		c.slow = tried + 1
	}
	if c.slowSince.IsZero() {
		c.slowSince = time.Now()
		c.log.Warn("coordinator slow: etcd answers late on a live connection; waiting longer", "timeout", c.cfg.RequestTimeout<<c.slow)
	}
	return c.slow
}

// connected reports whether the connection to etcd is up: gRPC's
// keep-alives are answered, so a timeout means etcd is slow, not gone.
func (c *Client) connected() bool {
	conn := c.cli.ActiveConnection()
	return conn != nil && conn.GetState() == connectivity.Ready
}

// Slow is "" while etcd answers in time, else since when it has answered
// late (on a connection that is up) and the timeout requests now have.
func (c *Client) Slow() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slowSince.IsZero() || !c.downSince.IsZero() {
		return ""
	}
	return fmt.Sprintf("coordinator slow since %s: etcd answers late; requests wait up to %s", c.slowSince.Format(time.RFC3339), c.cfg.RequestTimeout<<c.slow)
}

// unreachable tells a call etcd did not answer from one it answered with
// an error.
func unreachable(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, rpctypes.ErrTimeout), errors.Is(err, rpctypes.ErrNoLeader),
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail), errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost):
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return false
	}
	return clientv3.IsConnCanceled(err) || isUnavailable(err)
}

// Keys: every key of a fleet is below its prefix.
func (c *Client) key(parts ...string) string { return c.prefix + strings.Join(parts, "/") }

// revKey is a revision as one key part ("main@sha1:…" may hold '/' in the
// branch name).
func revKey(rev string) string { return url.PathEscape(rev) }

// isUnavailable reports a gRPC status of a member that could not answer.
func isUnavailable(err error) bool {
	s, ok := status.FromError(err)
	return ok && (s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded || s.Code() == codes.Canceled)
}
