package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// The agent's side of the revision gate (reconcile/revisions.go): a new
// revision goes on trial; its verdict is recorded, and a bad one rolled
// back to the last good revision, which the host is then held on. All of
// it runs on the poll loop, one thing at a time, as fetches do.

// errStopped: the agent stopped before it could do what was asked.
var errStopped = errors.New("the agent is stopping")

// errNothingToRetry: retry found no refused revision and no rollback.
var errNothingToRetry = errors.New("nothing to retry: no revision is refused, and no rollback holds the host")

// rollbackReasons are the values of cortexsync_rollbacks_total's label.
var rollbackReasons = []string{string(reconcile.CauseApply), string(reconcile.CauseUnhealthy), string(reconcile.CauseCheck), string(reconcile.CauseManual)}

// RolledBack counts one rollback, by its cause.
func (m *Metrics) RolledBack(c reconcile.Cause) { m.rollbacks.WithLabelValues(string(c)).Inc() }

// ObserveGood records the time from a revision's apply to good.
func (m *Metrics) ObserveGood(d time.Duration) { m.goodSeconds.Observe(d.Seconds()) }

// SetRolledBack says whether a rollback holds the host.
func (m *Metrics) SetRolledBack(on bool) {
	v := 0.0
	if on {
		v = 1
	}
	m.rolledBack.Set(v)
}

// exec runs f on the poll loop; it gives up when ctx ends or the agent
// stops.
func (a *Agent) exec(ctx context.Context, f func(context.Context)) error {
	select {
	case a.do <- f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-a.quit:
		return errStopped
	}
}

// ask runs f on the poll loop and returns what it returns.
func (a *Agent) ask(ctx context.Context, f func(context.Context) (string, error)) (string, error) {
	type answer struct {
		rev string
		err error
	}
	reply := make(chan answer, 1)
	if err := a.exec(ctx, func(ctx context.Context) {
		rev, err := f(ctx)
		reply <- answer{rev, err}
	}); err != nil {
		return "", err
	}
	select {
	case r := <-reply:
		return r.rev, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	case <-a.quit:
		return "", errStopped
	}
}

// try puts the newly adopted revision d on trial, keys being what it
// changes: its look runs beside the queue's work, and its verdict comes
// back to the poll loop.
func (a *Agent) try(ctx context.Context, d *reconcile.Desired, keys []resource.ID) {
	t := a.sess.Begin(d, keys, a.sess.View().Revision == d.Revision(), time.Now())
	a.gaugeRolledBack()
	if t == nil {
		return
	}
	a.trialPolicy(t)
	tctx, stop := context.WithCancel(ctx)
	a.mu.Lock()
	a.trial, a.trialStop = t, stop
	a.mu.Unlock()
	p := t.Policy(a.opts.Revisions)
	a.log.Info("revision on trial", "revision", t.Revision, "min_ready", p.MinReady, "progress_deadline", p.ProgressDeadline, "checks", len(p.Checks))
	a.bg.Go(func() {
		j := a.sess.Await(tctx, t, a.poke)
		if tctx.Err() == nil {
			a.exec(tctx, func(ctx context.Context) { a.verdict(ctx, t, j) })
		}
	})
}

// stopTrial ends the look at the revision on trial: another is adopted.
func (a *Agent) stopTrial() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.trialStop != nil {
		a.trialStop()
	}
	a.trial, a.trialStop = nil, nil
}

// lookNow has the revision on trial looked at again at once: something
// converged, or a process changed.
func (a *Agent) lookNow() {
	select {
	case a.poke <- struct{}{}:
	default:
	}
}

// verdict records how the trial of t ended: a good revision is the last
// known good; a bad one is rolled back, or kept (onFailure: halt, or no
// last good revision to go back to). One log line says each decision.
func (a *Agent) verdict(ctx context.Context, t *reconcile.Trial, j reconcile.Judgement) {
	a.mu.Lock()
	current := a.trial == t
	a.mu.Unlock()
	if !current {
		return // another revision was adopted meanwhile
	}
	a.stopTrial()
	prev := ""
	if g := a.sess.View().LastGood; g != nil {
		prev = g.Revision
	}
	a.sess.Judge(t, j, j.At)
	log := a.log.With("revision", t.Revision)
	switch j.Verdict {
	case state.Good:
		took := j.At.Sub(t.Start)
		a.opts.Metrics.ObserveGood(took)
		log.Info("revision good: it is the last known good revision now", "previous_good", prev, "took", took.Round(time.Millisecond))
	case state.Bad:
		switch {
		case a.opts.Revisions.OnFailure == reconcile.OnFailureHalt:
			log.Error("revision bad; halted on it (onFailure: halt)", "last_good", prev, "failing", j.Failing, "reason", j.Reason)
		case prev == "" || prev == t.Revision:
			log.Error("revision bad; no last good revision to roll back to, so the host stays on it", "failing", j.Failing, "reason", j.Reason)
		case !reconcile.CanRollBack(a.opts.Source):
			log.Error("revision bad; the source keeps no history to roll back to, so the host stays on it", "last_good", prev, "failing", j.Failing, "reason", j.Reason)
		default:
			log.Error("revision bad; rolling back to the last good revision", "to", prev, "failing", j.Failing, "reason", j.Reason)
			// Held from the bad revision itself: a newer head a fleet held
			// back while it was judged (judgeFirst) is a newer commit, let in.
			a.rollBack(ctx, reconcile.Rollback{To: prev, From: t.Revision, Head: t.Revision, Reason: j.Why()}, j.Cause)
		}
	}
	if err := a.sess.Writer().Flush(ctx); err != nil {
		a.log.Error("save snapshot", "error", err)
	}
	a.publishNow()
	if a.opts.Fleet != nil {
		a.readmit(ctx) // a newer revision that waited for this verdict
	}
}

// rollBack records the rollback r (before anything changes: an agent
// killed halfway finishes it when it starts again), then applies r.To.
func (a *Agent) rollBack(ctx context.Context, r reconcile.Rollback, cause reconcile.Cause) {
	if err := a.sess.RecordRollback(ctx, r, time.Now()); err != nil {
		a.log.Error("cannot record the rollback; the host stays on the bad revision", "revision", r.From, "to", r.To, "error", err)
		return
	}
	a.opts.Metrics.RolledBack(cause)
	a.gaugeRolledBack()
	a.follow(ctx, r.To, TriggerRollback, a.watcher())
}

// follow adopts rev, a revision the host applied before, as the revision
// it converges to (no trial: it is the last good one, or the one the host
// is held on). A failure to load it is tried again at the next fetch.
func (a *Agent) follow(ctx context.Context, rev string, t Trigger, w *watcher) {
	d, err := reconcile.LoadAt(ctx, a.opts.Source, rev, a.opts.Engine.Manifests(), a.log)
	if err != nil {
		a.mu.Lock()
		a.fetchErr = fmt.Errorf("load %s, the revision the host is held on: %w", rev, err)
		a.mu.Unlock()
		a.log.Error("cannot load the revision the host is held on; trying again soon", "revision", rev, "error", err)
		a.publishNow()
		// Tried again soon, then less and less often, up to the poll
		// interval: a rollback must not wait an hour for a hiccup.
		a.mu.Lock()
		delay := min(followRetry<<min(a.followFails, 10), a.opts.Interval)
		a.followFails++
		a.mu.Unlock()
		time.AfterFunc(delay, func() { a.Reconcile(TriggerRollback) })
		return
	}
	a.mu.Lock()
	a.followFails = 0
	a.mu.Unlock()
	a.adopt(ctx, d, t, time.Now(), w, false, nil)
	a.settle()
}

// followRetry is the first wait before a revision the host is held on is
// loaded again, after a failure.
const followRetry = time.Second

// stay keeps the host off the source's newest revision head, as the gate
// said: it goes on healing the revision it is on, or goes to the one a
// rollback holds it on (a rollback a killed agent began is finished so).
func (a *Agent) stay(ctx context.Context, t Trigger, head string, adm reconcile.Admission, w *watcher) {
	cur := a.sess.Desired()
	target, trigger := adm.Pin, TriggerRollback
	if target == "" && cur == nil {
		target, trigger = a.sess.View().Revision, TriggerRevision // heal what the host is on
	}
	a.mu.Lock()
	same := a.heldBack != nil && a.heldBack.Revision == head && a.heldBack.Error == adm.Stay.Error()
	if !same {
		a.heldBack = &reconcile.Refusal{Revision: head, Error: adm.Stay.Error(), Since: time.Now().UTC().Truncate(time.Second)}
	}
	a.mu.Unlock()
	if !same {
		on := target
		if cur != nil {
			on = cur.Revision()
		}
		a.log.Warn("revision not applied; the host stays on the revision it is on", "revision", head, "on", on, "why", adm.Stay)
		a.publishNow()
	}
	if target != "" && (cur == nil || cur.Revision() != target) {
		a.follow(ctx, target, trigger, w)
		return
	}
	if t == TriggerManual {
		a.scan(ctx, t)
	}
}

// unpin ends a rollback's hold once the source's head is the revision the
// host is on.
func (a *Agent) unpin(head string) {
	a.mu.Lock()
	held := a.heldBack != nil
	a.heldBack = nil
	a.mu.Unlock()
	if a.sess.Unpin(head) {
		a.log.Info("the source's head is the revision the host is held on: the rollback ends", "revision", head)
		a.gaugeRolledBack()
		held = true
	}
	if held {
		a.publishNow()
	}
}

// Rollback applies an earlier revision (to: "" for the last good one; a
// revision this host applied, or a unique prefix of it) and holds the host
// there until a newer commit or Resume: cortex-sync rollback. It returns
// the revision once its apply is under way.
func (a *Agent) Rollback(ctx context.Context, to string) (string, error) {
	return a.ask(ctx, func(ctx context.Context) (string, error) { return a.rollbackByHand(ctx, to) })
}

func (a *Agent) rollbackByHand(ctx context.Context, to string) (string, error) {
	rev, err := reconcile.ResolveApplied(a.sess.View(), to)
	if err != nil {
		return "", err
	}
	if !reconcile.CanRollBack(a.opts.Source) {
		return "", reconcile.ErrNoHistory
	}
	// Loaded first: a revision that cannot be fetched, or no longer
	// validates, is refused before anything is recorded.
	d, err := reconcile.LoadAt(ctx, a.opts.Source, rev, a.opts.Engine.Manifests(), a.log)
	if err != nil {
		return "", fmt.Errorf("load %s: %w", rev, err)
	}
	cur := a.sess.Desired()
	from := ""
	if cur != nil {
		from = cur.Revision()
	}
	a.stopTrial()
	if err := a.sess.RecordRollback(ctx, reconcile.Rollback{To: rev, From: from, Head: a.headRevision(), Manual: true}, time.Now()); err != nil {
		d.Close()
		return "", err
	}
	a.opts.Metrics.RolledBack(reconcile.CauseManual)
	a.gaugeRolledBack()
	a.log.Warn("rolling back by hand; held there until a newer commit or cortex-sync resume", "revision", from, "to", rev)
	if cur != nil && cur.Revision() == rev {
		d.Close()
	} else {
		a.adopt(ctx, d, TriggerRollback, time.Now(), a.watcher(), false, nil)
		a.settle()
	}
	a.publishNow()
	return rev, nil
}

// Retry applies the revision a rollback refused (or holds the host off)
// anyway: cortex-sync retry. It returns that revision.
func (a *Agent) Retry(ctx context.Context) (string, error) {
	return a.ask(ctx, func(ctx context.Context) (string, error) {
		rev, err := a.sess.Release(ctx, true)
		switch {
		case err != nil:
			return "", err
		case rev == "":
			return "", errNothingToRetry
		}
		a.gaugeRolledBack()
		a.log.Warn("retrying a revision by hand", "revision", rev)
		a.refresh(ctx, TriggerManual, a.watcher())
		return rev, nil
	})
}

// resume ends a rollback made by hand, and fetches.
func (a *Agent) resume(ctx context.Context) {
	rev, err := a.sess.Release(ctx, false)
	if err != nil {
		a.log.Error("end the rollback", "error", err)
	}
	if rev != "" {
		a.gaugeRolledBack()
		a.log.Info("resumed: the rollback by hand ends", "head", rev)
	}
	a.refresh(ctx, TriggerManual, a.watcher())
}

// rolledBackYet says, once, that a rollback converged: the host is on the
// revision it is held on, in full.
func (a *Agent) rolledBackYet() {
	view := a.sess.View()
	pin := view.Pin
	a.mu.Lock()
	done := pin != nil && view.Revision == pin.Revision && a.rolledTo != pin
	if done {
		a.rolledTo = pin
	}
	a.mu.Unlock()
	if done {
		a.log.Info("rolled back: the host is on the revision it is held on", "revision", pin.Revision, "held_from", pin.Head, "took", time.Since(pin.Since).Round(time.Millisecond))
		a.publish()
	}
}

func (a *Agent) gaugeRolledBack() {
	a.opts.Metrics.SetRolledBack(a.sess.View().Pin != nil)
}

func (a *Agent) headRevision() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.head
}

func (a *Agent) watcher() *watcher {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.watch
}
