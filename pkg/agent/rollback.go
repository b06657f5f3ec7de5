package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// The agent's side of the revision gate (reconcile/revisions.go): a new
// revision goes on trial; its verdict is recorded, and a bad one rolled
// back to the last good revision, which the host is then held on. All of
// it runs on the poll loop, one thing at a time, as fetches do.

// errStopped: the agent stopped before it could do what was asked.
var errStopped = errors.New("the agent is stopping")

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
	case a.revs.do <- f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-a.revs.quit:
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
	case <-a.revs.quit:
		return "", errStopped
	}
}

// try looks at the revision on trial t (reconcile.Life put it there)
// beside the queue's work; its verdict comes back to the poll loop.
func (a *Agent) try(ctx context.Context, t *reconcile.Trial) {
	a.trialPolicy(t)
	tctx, stop := context.WithCancel(ctx)
	a.revs.mu.Lock()
	a.revs.trial, a.revs.trialStop = t, stop
	a.revs.mu.Unlock()
	p := t.Policy(a.opts.Revisions)
	a.log.Info("revision on trial", "revision", t.Revision, "min_ready", p.MinReady, "progress_deadline", p.ProgressDeadline, "checks", len(p.Checks))
	a.publishNow()
	a.bg.Go(func() {
		j := a.sess.Await(tctx, t, a.revs.poke)
		if tctx.Err() == nil {
			a.exec(tctx, func(ctx context.Context) { a.verdict(ctx, t, j) })
		}
	})
}

// stopTrial ends the look at the revision on trial: another is adopted.
func (a *Agent) stopTrial() {
	a.revs.mu.Lock()
	defer a.revs.mu.Unlock()
	if a.revs.trialStop != nil {
		a.revs.trialStop()
	}
	a.revs.trial, a.revs.trialStop = nil, nil
}

// lookNow has the revision on trial looked at again at once: something
// converged, or a process changed.
func (a *Agent) lookNow() {
	select {
	case a.revs.poke <- struct{}{}:
	default:
	}
}

// verdict hands how the trial of t ended to its life, and maps what was
// decided: good, halted on it, or rolled back (the revision rolled back to
// is adopted). One log line says each decision.
func (a *Agent) verdict(ctx context.Context, t *reconcile.Trial, j reconcile.Judgement) {
	a.revs.mu.Lock()
	current := a.revs.trial == t
	a.revs.mu.Unlock()
	if !current {
		return // another revision was adopted meanwhile
	}
	a.stopTrial()
	old := a.sess.Desired()
	out := a.revs.life.Verdict(ctx, t, j)
	log := a.log.With("revision", t.Revision)
	switch out.Phase {
	case reconcile.PhaseGood:
		took := j.At.Sub(t.Start)
		a.opts.Metrics.ObserveGood(took)
		log.Info("revision good: it is the last known good revision now", "took", took.Round(time.Millisecond))
		a.tell(events.Event{Severity: events.Info, Reason: events.RevisionGood, Revision: t.Revision, Condition: condRevision,
			Message: fmt.Sprintf("revision good after %s: it is the last known good revision now", took.Round(time.Millisecond))})
	case reconcile.PhaseHalted:
		log.Error("revision bad; the host stays on it", "failing", j.Failing, "why", out.Why)
		a.tell(events.Event{Severity: events.Error, Reason: events.RevisionBad, Revision: t.Revision, Resource: failingResource(j), Condition: condRevision,
			Message: "revision bad: " + j.Why() + "; the host stays on it: " + errText(out.Why)})
	case reconcile.PhaseRolledBack:
		log.Error("revision bad; rolling back to the last good revision", "to", out.To, "failing", j.Failing, "reason", j.Reason)
		a.tell(events.Event{Severity: events.Error, Reason: events.RevisionBad, Revision: t.Revision, Resource: failingResource(j), Condition: condRevision,
			Message: "revision bad: " + j.Why()})
		a.tell(events.Event{Severity: events.Warning, Reason: events.RevisionRolledBack, Revision: t.Revision, Condition: condRevision,
			Message: fmt.Sprintf("rolling back from %s to %s, the last good revision (%s); held there until a newer commit", t.Revision, out.To, j.Cause)})
		a.opts.Metrics.RolledBack(j.Cause)
		a.adopt(ctx, old, out.Desired, nil, TriggerRollback, time.Now(), a.watcher(), nil)
		a.settle()
	}
	a.gaugeRolledBack()
	a.publishNow()
	if a.opts.Fleet != nil {
		a.readmit(ctx) // a newer revision that waited for this verdict
	}
}

// stay keeps the host off the source's newest revision, as its life said
// (out): it goes on healing the revision it is on, or goes to the one a
// rollback holds it on (a rollback a killed agent began is finished so).
// A revision to go to that cannot be loaded is tried again soon.
func (a *Agent) stay(ctx context.Context, t Trigger, out reconcile.Outcome, old *reconcile.Desired, w *watcher) {
	a.revs.mu.Lock()
	same := a.revs.heldBack != nil && a.revs.heldBack.Revision == out.Revision && a.revs.heldBack.Error == out.Why.Error()
	if !same {
		a.revs.heldBack = &reconcile.Refusal{Revision: out.Revision, Error: out.Why.Error(), Since: time.Now().UTC().Truncate(time.Second)}
		if we := (*reconcile.WindowError)(nil); errors.As(out.Why, &we) {
			a.revs.heldBack.Reason, a.revs.heldBack.WindowOpens = reconcile.ReasonWindow, we.Opens.UTC()
		}
	}
	a.revs.mu.Unlock()
	if !same {
		a.log.Warn("revision not applied; the host stays on the revision it is on", "revision", out.Revision, "why", out.Why)
		a.tell(events.Event{Severity: events.Info, Reason: events.RevisionHeld, Revision: out.Revision,
			Message: "revision not applied; the host stays on the revision it is on: " + errText(out.Why)})
		a.publishNow()
	}
	switch {
	case out.Desired != nil:
		a.revs.mu.Lock()
		a.revs.followFails = 0
		a.revs.mu.Unlock()
		trigger := TriggerRollback // the revision a rollback holds the host on
		if out.To == "" {
			trigger = TriggerRevision // the one the host is on, healed while a gate holds the new one
		}
		a.adopt(ctx, old, out.Desired, nil, trigger, time.Now(), w, nil)
	case errors.Is(out.Why, reconcile.ErrUnloadable):
		// Tried again soon, then less and less often, up to the poll
		// interval: a rollback must not wait an hour for a hiccup.
		a.revs.mu.Lock()
		if a.revs.fetchErr == nil {
			a.revs.fetchFailing = time.Now()
		}
		a.revs.fetchErr = out.Why
		delay := min(followRetry<<min(a.revs.followFails, 10), a.opts.Interval)
		a.revs.followFails++
		a.revs.mu.Unlock()
		a.publishNow()
		time.AfterFunc(delay, func() { a.Reconcile(TriggerRollback) })
	case t == TriggerManual:
		a.scan(ctx, t)
	}
}

// followRetry is the first wait before a revision the host is held on is
// loaded again, after a failure.
const followRetry = time.Second

// unpin ends a rollback's hold once the source's head is the revision the
// host is on.
func (a *Agent) unpin(head string) {
	a.revs.mu.Lock()
	held := a.revs.heldBack != nil
	a.revs.heldBack = nil
	a.revs.mu.Unlock()
	if a.revs.life.OnHead(head) {
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
	return a.ask(ctx, func(ctx context.Context) (string, error) {
		a.stopTrial()
		old := a.sess.Desired()
		out, err := a.revs.life.Rollback(ctx, to, a.headRevision(), time.Now())
		if err != nil {
			return "", err
		}
		a.opts.Metrics.RolledBack(reconcile.CauseManual)
		a.log.Warn("rolling back by hand; held there until a newer commit or cortex-sync resume", "revision", out.Revision, "to", out.To)
		a.tell(events.Event{Severity: events.Warning, Reason: events.RevisionRolledBack, Revision: out.Revision,
			Message: fmt.Sprintf("rolling back by hand from %s to %s; held there until a newer commit or cortex-sync resume", out.Revision, out.To)})
		if out.Desired != nil {
			a.adopt(ctx, old, out.Desired, nil, TriggerRollback, time.Now(), a.watcher(), nil)
			a.settle()
		}
		a.gaugeRolledBack()
		a.publishNow()
		return out.To, nil
	})
}

// Retry applies the revision a rollback refused (or holds the host off)
// anyway: cortex-sync retry. It returns that revision.
func (a *Agent) Retry(ctx context.Context) (string, error) {
	return a.ask(ctx, func(ctx context.Context) (string, error) {
		rev, err := a.revs.life.Retry(ctx)
		if errors.Is(err, reconcile.ErrNothingToRetry) {
			a.revs.mu.Lock()
			r := a.revs.refused
			a.revs.mu.Unlock()
			if r != nil {
				// Refused at every fetch, for what it is: no verb lets it in.
				return "", fmt.Errorf("nothing to retry: %s; it is refused at every fetch, until a newer commit fixes that", r.Summary())
			}
		}
		if err != nil {
			return "", err
		}
		a.gaugeRolledBack()
		a.log.Warn("retrying a revision by hand", "revision", rev)
		a.refresh(ctx, TriggerManual, a.watcher())
		return rev, nil
	})
}

// Resume applies again after Suspend, and ends a rollback by hand: the
// source's newest revision is fetched. It says what it ended; with nothing
// to end it fails, and a rollback that is automatic is named with the verb
// that ends it (retry): resume never lets a revision judged bad in.
func (a *Agent) Resume(ctx context.Context) (string, error) {
	was := a.opts.Suspend
	if was {
		a.setSuspended(false)
	}
	rev, err := a.ask(ctx, func(ctx context.Context) (string, error) {
		rev, err := a.revs.life.Resume(ctx)
		if err == nil {
			a.gaugeRolledBack()
			a.log.Info("resumed: the rollback by hand ends", "head", rev)
		}
		a.refresh(ctx, TriggerManual, a.watcher())
		return rev, err
	})
	switch {
	case err == nil:
		return "the rollback by hand ends; the agent applies " + rev + " or newer", nil
	case was && errors.Is(err, reconcile.ErrNothingToResume):
		return "the agent applies again", nil
	case was && errors.Is(err, reconcile.ErrAutomaticRollback):
		return "the agent applies again; " + err.Error(), nil
	case errors.Is(err, reconcile.ErrNothingToResume):
		return "", fmt.Errorf("%w: the agent is not suspended, and no rollback by hand holds the host", reconcile.ErrNothingToResume)
	}
	return "", err
}

// rolledBackYet says, once, that a rollback converged: the host is on the
// revision it is held on, in full.
func (a *Agent) rolledBackYet() {
	view := a.sess.View()
	pin := view.Pin
	a.revs.mu.Lock()
	done := pin != nil && view.Revision == pin.Revision && a.revs.rolledTo != pin
	if done {
		a.revs.rolledTo = pin
	}
	a.revs.mu.Unlock()
	if done {
		a.log.Info("rolled back: the host is on the revision it is held on", "revision", pin.Revision, "held_from", pin.Head, "took", time.Since(pin.Since).Round(time.Millisecond))
		a.publish()
	}
}

// gaugeRolledBack sets the revision's gauges from the snapshot, where its
// life records it: a rollback holding the host, and the verdict of the
// revision the host converges to (the one on trial, when one is).
func (a *Agent) gaugeRolledBack() {
	view := a.sess.View()
	a.opts.Metrics.SetRolledBack(view.Pin != nil)
	v := state.Verdict("")
	if tr := view.Trial(); tr != nil {
		v = tr.Verdict
	} else if d := a.sess.Desired(); d != nil {
		if l := view.Latest(d.Revision()); l != nil {
			v = l.Verdict
		}
	}
	a.opts.Metrics.SetVerdict(v)
}

// verdicts are the values of cortexsync_revision_verdict's label.
var verdicts = []state.Verdict{state.Pending, state.Good, state.Bad, ""}

// SetVerdict says the verdict of the revision the host converges to (""
// when it was not judged).
func (m *Metrics) SetVerdict(v state.Verdict) {
	for _, o := range verdicts {
		val := 0.0
		if o == v {
			val = 1
		}
		m.verdict.WithLabelValues(cmp.Or(string(o), "none")).Set(val)
	}
}

func (a *Agent) headRevision() string {
	a.revs.mu.Lock()
	defer a.revs.mu.Unlock()
	return a.revs.head
}

func (a *Agent) watcher() *watcher {
	a.keys.mu.Lock()
	defer a.keys.mu.Unlock()
	return a.keys.watch
}
