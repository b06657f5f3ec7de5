package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// A singleton's holder fences itself on its own clock. etcd tells a
// partitioned holder late that its lease is gone (its client learns only
// when it reaches etcd again), while a new holder can be elected as soon
// as the lease expires on the server. So the holder keeps the lease alive
// itself, one request at a time, noting when each was sent; the server
// renewed the lease after that moment, so the lease cannot expire before
// send + TTL. The holder's deadline is the last answered send + TTL/2:
// past it, it must have stopped the singleton. The half TTL left is the
// margin for clocks that run at slightly different rates and for stopping.
//
// The deadline is on CLOCK_BOOTTIME, which counts a suspend as time
// passing (etcd's clock does): CLOCK_MONOTONIC would stop during a
// suspend and let a resumed holder run on.

// DefaultSingletonTTL is a singleton lease's TTL: failover takes about
// this long plus the process's start.
const DefaultSingletonTTL = 10 * time.Second

// fenceTick is how often the fence looks at the clock: a Go timer runs on
// CLOCK_MONOTONIC and would fire late after a suspend.
const fenceTick = 50 * time.Millisecond

// Holder holds a singleton: until its deadline passes (Done closes) it
// may run the singleton and write through its fence.
type Holder struct {
	c        *Client
	name     string
	ttl      time.Duration
	lease    clientv3.LeaseID
	session  *concurrency.Session
	election *concurrency.Election
	key      string
	rev      int64 // the election key's create revision: the fence token

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	deadline time.Duration // on BootTime
	done     chan struct{}
	closed   bool
	why      error
}

// ErrFenced is returned by a fenced write of a holder that is no longer
// the holder (its deadline passed, it resigned, or another holds it).
var ErrFenced = errors.New("not the singleton's holder any more")

// Campaign waits until this host holds the singleton name, keeping a
// lease of ttl (0: DefaultSingletonTTL) alive while it waits and holds.
// value is shown to others as the holder (the host name).
func (c *Client) Campaign(ctx context.Context, name, value string, ttl time.Duration) (*Holder, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("singleton %q: %w", name, err)
	}
	if ttl <= 0 {
		ttl = DefaultSingletonTTL
	}
	ttl = ttl.Round(time.Second)
	var lease clientv3.LeaseID
	sent := BootTime()
	if err := c.call(ctx, func(ctx context.Context) error {
		g, err := c.cli.Grant(ctx, int64(ttl.Seconds()))
		if err == nil {
			lease = g.ID
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("singleton %s: %w", name, err)
	}
	hctx, cancel := context.WithCancel(context.Background())
	h := &Holder{c: c, name: name, ttl: ttl, lease: lease, cancel: cancel, deadline: sent + ttl/2, done: make(chan struct{})}
	h.wg.Add(2)
	go h.keepAlive(hctx)
	go h.fence(hctx)
	s, err := concurrency.NewSession(c.cli, concurrency.WithLease(lease), concurrency.WithContext(hctx))
	if err != nil {
		h.stop(err)
		return nil, fmt.Errorf("singleton %s: %w", name, err)
	}
	h.session = s
	h.election = concurrency.NewElection(s, c.key("singleton", name))
	cctx, ccancel := context.WithCancel(ctx)
	go func() { // a holder that lost its lease while waiting stops waiting
		select {
		case <-h.done:
			ccancel()
		case <-cctx.Done():
		}
	}()
	// The election's Campaign, cancelled, resigns with the client's own
	// context, which waits for etcd as long as the client lives: with etcd
	// unreachable it would not return. Waiting stops with ctx all the
	// same; Resign below revokes the lease, or it expires.
	won := make(chan error, 1)
	go func() { won <- h.election.Campaign(cctx, value) }()
	select {
	case err = <-won:
	case <-cctx.Done():
		err = cctx.Err()
		if why := h.Err(); ctx.Err() == nil && why != nil {
			err = why // the lease was lost while waiting
		}
	}
	ccancel()
	if err == nil && !h.Valid() {
		err = h.why
	}
	if err != nil {
		h.Resign(context.Background())
		return nil, fmt.Errorf("singleton %s: %w", name, err)
	}
	h.key, h.rev = h.election.Key(), h.election.Rev()
	return h, nil
}

// keepAlive renews the lease every TTL/4, one request at a time, and
// moves the deadline to the send time of each answered one + TTL/2.
func (h *Holder) keepAlive(ctx context.Context) {
	defer h.wg.Done()
	for {
		sent := BootTime()
		kctx, cancel := context.WithTimeout(ctx, h.ttl/4)
		resp, err := h.c.cli.KeepAliveOnce(kctx, h.lease)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || err == nil && resp.TTL <= 0:
			h.stop(errors.New("its lease expired in etcd"))
			return
		case err == nil:
			h.mu.Lock()
			if d := sent + time.Duration(resp.TTL)*time.Second/2; d > h.deadline && !h.closed {
				h.deadline = d
			}
			h.mu.Unlock()
		}
		if !sleep(ctx, h.ttl/4) {
			return
		}
	}
}

// fence closes Done when the deadline passes.
func (h *Holder) fence(ctx context.Context) {
	defer h.wg.Done()
	t := time.NewTicker(fenceTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		past := BootTime() >= h.deadline
		h.mu.Unlock()
		if past {
			h.stop(fmt.Errorf("no lease renewal answered for %s (TTL/2): etcd may already have let another host take it", h.ttl/2))
			return
		}
	}
}

// stop ends the holding: Done closes, the deadline is now.
func (h *Holder) stop(why error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed, h.why = true, why
	if now := BootTime(); h.deadline > now {
		h.deadline = now
	}
	close(h.done)
}

// Deadline is the time on BootTime after which the holder must have
// stopped the singleton, unless a renewal moves it. The supervisor
// enforces it even when the agent is gone.
func (h *Holder) Deadline() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

// Valid reports whether the deadline has not passed.
func (h *Holder) Valid() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.closed && BootTime() < h.deadline
}

// Done is closed when the holder must stop: deadline passed, lease lost,
// or resigned. Err then says why.
func (h *Holder) Done() <-chan struct{} { return h.done }

// Err says why Done closed.
func (h *Holder) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.why
}

// Name is the singleton's name.
func (h *Holder) Name() string { return h.name }

// TTL is the singleton lease's TTL: another host can hold the singleton no
// sooner than the last answered renewal's send time plus TTL.
func (h *Holder) TTL() time.Duration { return h.ttl }

// SingletonHolder is the host that holds singleton name now ("" when
// none): the value of its oldest candidate.
func (c *Client) SingletonHolder(ctx context.Context, name string) (string, error) {
	var holder string
	err := c.call(ctx, func(ctx context.Context) error {
		resp, err := c.cli.Get(ctx, c.key("singleton", name)+"/", clientv3.WithFirstCreate()...)
		if err == nil && len(resp.Kvs) > 0 {
			holder = c.candidate(pairs(resp)[0], nil)
		}
		return err
	})
	return holder, err
}

// Put writes key (below the singleton's own keys) only while this holder
// is the holder in etcd: the transaction compares the election key's
// create revision, so a holder that lost it writes nothing.
func (h *Holder) Put(ctx context.Context, key, value string) error {
	if !h.Valid() {
		return fmt.Errorf("singleton %s: %w", h.name, ErrFenced)
	}
	var ok bool
	err := h.c.call(ctx, func(ctx context.Context) error {
		resp, err := h.c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)).
			Then(clientv3.OpPut(h.c.key("singleton-data", h.name, key), value)).Commit()
		if err == nil {
			ok = resp.Succeeded
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("singleton %s: %w", h.name, err)
	}
	if !ok {
		h.stop(errors.New("another host holds it"))
		return fmt.Errorf("singleton %s: %w", h.name, ErrFenced)
	}
	return nil
}

// SingletonValue reads a key a holder of singleton name wrote with Put.
func (c *Client) SingletonValue(ctx context.Context, name, key string) (string, error) {
	var v string
	err := c.call(ctx, func(ctx context.Context) error {
		resp, err := c.cli.Get(ctx, c.key("singleton-data", name, key))
		if err == nil && len(resp.Kvs) > 0 {
			v = string(resp.Kvs[0].Value)
		}
		return err
	})
	return v, err
}

// Resign gives the singleton up: Done closes, and the lease is revoked so
// another host is elected at once.
func (h *Holder) Resign(ctx context.Context) error {
	h.stop(errors.New("resigned"))
	h.cancel()
	h.wg.Wait()
	rctx, cancel := context.WithTimeout(ctx, h.c.cfg.RequestTimeout)
	defer cancel()
	_, err := h.c.cli.Revoke(rctx, h.lease)
	return err
}

// unknownCandidate stands for a candidate whose value is not a host name:
// it holds its place in the election all the same.
const unknownCandidate = "(a candidate whose record is not a host name)"

// candidate is the host a singleton's candidate key names; a value that
// is not a host name is ignored (told to ignore, when not nil) and the
// candidate shown as unknownCandidate, as it still holds its place.
func (c *Client) candidate(kv *kvPair, ignore func(*kvPair, error)) string {
	h := string(kv.value)
	if err := checkHost(h); err != nil {
		if ignore != nil {
			ignore(kv, err)
		} else {
			c.ignore(kv, err)
		}
		return unknownCandidate
	}
	return h
}
