// Package fleetagent is the agent's side of a fleet: pkg/fleet (etcd)
// behind pkg/agent's Coordinator. It joins the fleet, writes the host's
// status on change, gates new revisions on the rollout's slots, and runs
// the host's singletons through fences the supervisor keeps.
package fleetagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Options are how a host joins its fleet.
type Options struct {
	// Config reaches etcd; its Fleet may be "": the fleet is then named by
	// the metadata.name of the first revision's fleet.yaml.
	Config fleet.Config
	Host   resource.Host
	// StateDir is the agent's: the maintenance file and the fences live
	// there.
	StateDir string
	// PresenceTTL, Debounce: see fleet.MemberConfig; SingletonTTL: see
	// fleet.Client.Campaign (0: the defaults).
	PresenceTTL, Debounce, SingletonTTL time.Duration
	// Outlive makes the state dir's supervisor one that outlives the
	// agent (supervise.Host.Handover), so that a singleton's fence holds
	// when the agent is SIGKILLed; called once, before the first
	// campaign. nil: it does already.
	Outlive func() error
	Log     *slog.Logger
}

// Link is a host in its fleet: an agent.Coordinator.
type Link struct {
	opts Options
	log  *slog.Logger

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	wake     chan struct{} // to the agent: ask again
	armed    chan time.Duration
	verdicts chan verdict

	outlive     sync.Once
	outliveErr  error
	singletonMu sync.Mutex
	singles     map[string]*single

	mu      sync.Mutex
	member  *fleet.Member // nil until the fleet's name is known
	joinErr error         // why it is not in its fleet
	fetched map[string]agent.Fetched
	slot    string // the revision whose slot this host holds
	// unreported are the revisions whose verdict is not in etcd yet: no
	// newer slot is taken before it is (the verdict frees the old one).
	unreported map[string]bool
	suspended  bool
	last       agent.HostState
}

type verdict struct {
	rev, why string
	good     bool
}

var _ agent.Coordinator = (*Link)(nil)

// New makes the host a member of its fleet: at once when the fleet is
// named, else at the first revision whose fleet.yaml names it. It does not
// wait for etcd: the host runs, heals and reports while etcd is down, and
// joins when it answers.
func New(opts Options) (*Link, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Config.Log == nil {
		opts.Config.Log = opts.Log
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Link{opts: opts, log: opts.Log, ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), armed: make(chan time.Duration, 1), verdicts: make(chan verdict, 16),
		singles: map[string]*single{}, fetched: map[string]agent.Fetched{}, unreported: map[string]bool{}}
	if opts.Config.Fleet != "" {
		if err := l.join(opts.Config.Fleet); err != nil {
			cancel()
			return nil, err
		}
	} else {
		l.joinErr = errors.New("not in a fleet yet: no --fleet given, and no revision with a fleet.yaml fetched")
	}
	l.wg.Add(2)
	go l.waker()
	go l.reporter()
	return l, nil
}

// join dials etcd and joins the fleet name.
func (l *Link) join(name string) error {
	cfg := l.opts.Config
	cfg.Fleet = name
	c, err := fleet.Dial(cfg)
	if err != nil {
		return err
	}
	m, err := fleet.Join(c, fleet.MemberConfig{Host: l.opts.Host, PresenceTTL: l.opts.PresenceTTL, Debounce: l.opts.Debounce,
		MaintenanceFile: state.At(l.opts.StateDir).Sub(fleet.MaintenanceName).Path()})
	if err != nil {
		c.Close()
		return err
	}
	l.mu.Lock()
	l.member, l.joinErr = m, nil
	last := l.last
	l.mu.Unlock()
	if last.Revision != "" || last.Head != "" {
		m.SetStatus(statusOf(last))
	}
	l.log.Info("joined the fleet", "fleet", name, "host", l.opts.Host.Name, "endpoints", cfg.Endpoints)
	return nil
}

func (l *Link) getMember() *fleet.Member {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.member
}

// Close leaves the fleet: the singletons this host holds are stopped and
// given up (another host takes them at once), the slot is given back, and
// the presence is revoked.
func (l *Link) Close(ctx context.Context) error {
	l.singletonMu.Lock()
	singles := maps.Clone(l.singles)
	l.singles = map[string]*single{}
	l.singletonMu.Unlock()
	for _, s := range singles {
		s.stop("the agent stopped")
	}
	for _, s := range singles {
		s.wait(ctx)
	}
	l.cancel()
	l.wg.Wait()
	if m := l.getMember(); m != nil {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		m.Release(rctx)
		cancel()
		return m.Close()
	}
	return nil
}

// Fetched notes a fetched revision: its rollout, and whether it changes
// anything here. The first revision whose fleet.yaml names the fleet
// makes the host join it, when --fleet did not.
func (l *Link) Fetched(f agent.Fetched) {
	l.mu.Lock()
	l.fetched[f.Revision] = f
	for rev := range l.fetched {
		if len(l.fetched) > 8 && rev != f.Revision {
			delete(l.fetched, rev)
		}
	}
	joined := l.member != nil
	l.mu.Unlock()
	if !joined && f.Fleet != "" {
		if err := l.join(f.Fleet); err != nil {
			l.mu.Lock()
			l.joinErr = fmt.Errorf("join the fleet %q of fleet.yaml: %w", f.Fleet, err)
			l.mu.Unlock()
			l.log.Error("cannot join the fleet", "fleet", f.Fleet, "error", err)
		}
	}
}

// ErrWaiting: the fleet's rollout does not let the host apply the
// revision yet; it stays on the revision it is on, healing it.
var ErrWaiting = errors.New("not admitted by the fleet's rollout yet")

// ErrSuspended: a suspended agent takes no rollout slot.
var ErrSuspended = errors.New("suspended: this host takes no rollout slot until resumed")

// Admit asks the rollout for a slot to apply rev: a revision without a
// rollout, or that changes nothing here, needs none.
func (l *Link) Admit(ctx context.Context, rev string) error {
	l.mu.Lock()
	f, known := l.fetched[rev]
	m, suspended, slot := l.member, l.suspended, l.slot
	l.mu.Unlock()
	if !known || f.Rollout == nil || !f.Changes {
		if slot != "" && slot != rev {
			l.giveBack(slot) // a newer revision that needs none supersedes it
		} else if m != nil {
			l.unqueue(m) // nor does it wait for a slot any more
		}
		return nil
	}
	if suspended {
		return ErrSuspended
	}
	if m == nil {
		l.retryIn(time.Second)
		return &WaitError{Revision: rev, Why: fmt.Sprintf("rollout of %s: %v", rev, l.joinError())}
	}
	if prev := l.unreportedBut(rev); prev != "" {
		l.retryIn(time.Second) // or at once, when it is reported
		return &WaitError{Revision: rev, Why: fmt.Sprintf("rollout of %s: reporting this host's verdict on %s to the fleet first", rev, prev)}
	}
	d, err := m.Admit(ctx, fleet.Revision{ID: rev, Rollout: *f.Rollout})
	if err != nil {
		l.retryIn(time.Second)
		return fmt.Errorf("rollout of %s: %w", rev, err)
	}
	if !d.Go {
		l.retryIn(d.RetryAfter)
		return &WaitError{Revision: rev, Why: waitText(rev, d, *f.Rollout), Paused: d.Wait == fleet.WaitStopped}
	}
	l.mu.Lock()
	l.slot = rev
	l.mu.Unlock()
	l.log.Info("rollout slot taken: applying the revision", "revision", rev)
	return nil
}

// WaitError says why the rollout does not let the host apply a revision
// yet (errors.Is ErrWaiting).
type WaitError struct {
	Revision string
	Why      string
	Paused   bool // the rollout is paused or aborted, not just busy
}

func (e *WaitError) Error() string { return e.Why }
func (e *WaitError) Unwrap() error { return ErrWaiting }

// RolloutPaused says the rollout is paused (the agent tells it as an
// event, RolloutPaused).
func (e *WaitError) RolloutPaused() bool { return e.Paused }

// waitText says why a host waits, in words that change only when the
// reason does (the counts are in fleet status).
func waitText(rev string, d fleet.Decision, ro resource.Rollout) string {
	switch d.Wait {
	case fleet.WaitCanary:
		return fmt.Sprintf("rollout of %s: waiting for the canary hosts (%d) to be good", rev, ro.Canary)
	case fleet.WaitSlot, fleet.WaitBusy:
		return fmt.Sprintf("rollout of %s: waiting for a slot (maxUnavailable %s)", rev, ro.MaxUnavailable)
	}
	return d.Why
}

func (l *Link) joinError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.joinErr
}

// giveBack frees the slot of rev.
func (l *Link) giveBack(rev string) {
	l.mu.Lock()
	if l.slot == rev {
		l.slot = ""
	}
	m := l.member
	l.mu.Unlock()
	if m != nil {
		ctx, cancel := context.WithTimeout(l.ctx, 3*time.Second)
		defer cancel()
		if err := m.Release(ctx); err != nil {
			l.log.Warn("give the rollout slot back", "revision", rev, "error", err)
		}
	}
}

// Judged reports the verdict on a revision this host applied under the
// rollout: good frees its slot and counts towards the canary; bad keeps
// its place in the budget. It is sent once etcd answers.
func (l *Link) Judged(rev string, v state.Verdict, why string) {
	l.mu.Lock()
	f, ok := l.fetched[rev]
	if l.slot == rev {
		l.slot = ""
	}
	l.mu.Unlock()
	if !ok || f.Rollout == nil || !f.Changes || v != state.Good && v != state.Bad {
		return
	}
	l.mu.Lock()
	l.unreported[rev] = true
	l.mu.Unlock()
	select {
	case l.verdicts <- verdict{rev: rev, why: why, good: v == state.Good}:
	case <-l.ctx.Done():
	}
}

// unreportedBut is a revision other than rev whose verdict is not in
// etcd yet, or "".
func (l *Link) unreportedBut(rev string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for r := range l.unreported {
		if r != rev {
			return r
		}
	}
	return ""
}

// reporter sends verdicts, in order, each until etcd takes it.
func (l *Link) reporter() {
	defer l.wg.Done()
	for {
		var v verdict
		select {
		case <-l.ctx.Done():
			return
		case v = <-l.verdicts:
		}
		for l.ctx.Err() == nil {
			m := l.getMember()
			if m == nil {
				wait(l.ctx, time.Second)
				continue
			}
			l.mu.Lock()
			st := l.last
			l.mu.Unlock()
			if v.good {
				st.LastGood = v.rev // the verdict carries the status that follows it
			}
			m.SetStatus(statusOf(st))
			ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
			var err error
			if v.good {
				err = m.Good(ctx, v.rev)
			} else {
				err = m.Bad(ctx, v.rev, v.why)
			}
			cancel()
			if err == nil {
				l.log.Info("rollout verdict reported", "revision", v.rev, "good", v.good)
				l.mu.Lock()
				delete(l.unreported, v.rev)
				l.mu.Unlock()
				l.signalWake() // a newer revision may have waited for it
				break
			}
			l.log.Warn("report the verdict to the fleet; trying again", "revision", v.rev, "error", err)
			wait(l.ctx, time.Second)
		}
	}
}

// Wake delivers when a revision held back may be admitted now.
func (l *Link) Wake() <-chan struct{} { return l.wake }

func (l *Link) signalWake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// retryIn has the agent ask again after d, or sooner when the rollout
// changes.
func (l *Link) retryIn(d time.Duration) {
	for {
		select {
		case l.armed <- d:
			return
		default:
			select {
			case <-l.armed: // the newer answer wins
			default:
			}
		}
	}
}

// waker wakes the agent when a host that was told no may go: the rollout's
// keys changed (a slot freed, a resume, a hold released), or its retry is
// due (the maintenance file, an etcd that was down).
func (l *Link) waker() {
	defer l.wg.Done()
	for {
		var d time.Duration
		select {
		case <-l.ctx.Done():
			return
		case d = <-l.armed:
		}
		var changed <-chan struct{}
		if m := l.getMember(); m != nil {
			changed = m.Changed()
		}
		t := time.NewTimer(d)
		select {
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-changed:
			t.Stop()
		}
		l.signalWake()
	}
}

// Report hands over the host's state: written when it changed.
func (l *Link) Report(hs agent.HostState) {
	l.mu.Lock()
	l.last = hs
	m := l.member
	l.mu.Unlock()
	if m != nil {
		m.SetStatus(statusOf(hs))
		if !hs.WindowOpens.IsZero() {
			// It waits for its deploy window, not for a slot: its place in
			// the queue would hold up the hosts behind it.
			l.unqueue(m)
		}
	}
}

// unqueue takes the host out of the rollout's queue, in the background
// (the agent's loop never waits on etcd).
func (l *Link) unqueue(m *fleet.Member) {
	if !m.Queued() {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
		defer cancel()
		m.Unqueue(ctx)
	}()
}

func statusOf(hs agent.HostState) fleet.HostStatus {
	return fleet.HostStatus{Revision: hs.Revision, Head: hs.Head, HeadTime: hs.HeadSeen, Sync: string(hs.Sync), Health: string(hs.Health),
		LastGood: hs.LastGood, Fighting: hs.Fighting, LastError: hs.LastError, WindowOpens: hs.WindowOpens}
}

var _ agent.WindowOverrider = (*Link)(nil)

// WindowOverridden reports whether an operator let rev in outside the
// host's deploy windows (cortex-sync fleet rollout override-window): a
// host that cannot ask (not in its fleet yet, etcd down) waits for its
// window.
func (l *Link) WindowOverridden(ctx context.Context, rev string) bool {
	m := l.getMember()
	if m == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	ok, err := m.WindowOverridden(ctx, rev)
	if err != nil {
		l.log.Warn("cannot tell whether the deploy windows are overridden; the host waits for its window", "revision", rev, "error", err)
	}
	return ok
}

// Suspended: a suspended host takes no slot and gives back the one it
// holds; resumed, it asks again.
func (l *Link) Suspended(v bool) {
	l.mu.Lock()
	l.suspended = v
	slot := l.slot
	l.mu.Unlock()
	if v && slot != "" {
		go l.giveBack(slot)
	}
	if !v {
		l.signalWake()
	}
}

// Info is the host's part in the fleet.
func (l *Link) Info() reconcile.FleetReport {
	r := reconcile.FleetReport{Host: l.opts.Host.Name}
	if m := l.getMember(); m != nil {
		r.Fleet, r.Coordinator, r.Slow = m.Fleet(), m.Condition(), m.Slow()
		for _, ig := range m.Ignored() {
			r.Ignored = append(r.Ignored, ig.String())
		}
	} else if err := l.joinError(); err != nil {
		r.Coordinator = err.Error()
	}
	l.singletonMu.Lock()
	for name, s := range l.singles {
		if r.Singletons == nil {
			r.Singletons = map[string]string{}
		}
		r.Singletons[name] = s.holderName()
	}
	l.singletonMu.Unlock()
	return r
}

// Document is the fleet as etcd knows it, as fleet status -o json prints
// it.
func (l *Link) Document(ctx context.Context) (any, error) {
	m := l.getMember()
	if m == nil {
		return nil, l.joinError()
	}
	return m.Read(ctx, "")
}
