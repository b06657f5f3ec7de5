package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// waitAgain is how soon a key waiting for another to converge is looked
// at again.
const waitAgain = 250 * time.Millisecond

// errFighting: something else keeps undoing the resource; its next
// correction waits until it is left alone.
var errFighting = errors.New("fighting: something keeps undoing this resource; corrected once left alone")

// work takes one key off the queue and reconciles it; false once the queue
// shut down. Once ctx ends, what is still queued is left for the next
// start, which re-plans everything.
func (a *Agent) work(ctx context.Context) bool {
	id, shutdown := a.keys.queue.Get()
	if shutdown {
		return false
	}
	a.keys.inflight.Add(1)
	defer a.settle()
	defer a.keys.inflight.Add(-1)
	defer a.keys.queue.Done(id)
	if ctx.Err() != nil {
		return true
	}
	a.reconcile(ctx, id)
	a.passed(id)
	return true
}

// reconcile converges one key through the engine, and maps the outcome to
// a queue verb: the one place that does.
//
//	inSync, applied  forget the key's failures
//	waiting          again at Until (or soon, when it waits on another key)
//	failed, blocked  again, later and later
//	refused          dropped until the policy or the desired state changes
func (a *Agent) reconcile(ctx context.Context, id resource.ID) {
	o := a.sess.ConvergeIn(ctx, id, a.takeScope(id))
	defer a.account(id, o)
	switch o.Verdict {
	case diff.InSync, diff.Applied:
		a.keys.queue.Forget(id)
	case diff.Waiting:
		delay := waitAgain
		if !o.Until.IsZero() {
			delay = max(time.Until(o.Until), time.Millisecond)
		}
		a.widen(id)
		a.keys.queue.AddAfter(id, delay)
	case diff.Failed, diff.Blocked:
		a.widen(id)
		a.keys.queue.AddRateLimited(id)
	case diff.Refused:
		a.keys.queue.Forget(id)
	}
}

// account keeps what an outcome says: the held keys status shows, the
// running reconcile's counts, metrics, the fight detector and the log.
// It reads the observation the verdict was reached on.
func (a *Agent) account(id resource.ID, o diff.Outcome) {
	c := o.Change
	a.keys.mu.Lock()
	_, was := a.keys.held[id]
	switch o.Verdict {
	case diff.Waiting, diff.Blocked, diff.Refused:
		a.keys.held[id] = o
	default:
		delete(a.keys.held, id)
	}
	_, is := a.keys.held[id]
	// What cannot be observed is a condition until it can: never a
	// silent stop of healing.
	_, blind := a.keys.unobserved[id]
	cannot := c != nil && c.Err != nil && o.Verdict == diff.Failed
	if cannot {
		a.keys.unobserved[id] = c.Err
	} else if blind && o.Verdict != diff.Waiting {
		delete(a.keys.unobserved, id)
	}
	a.keys.mu.Unlock()
	if cannot {
		a.opts.Metrics.ObserveError(c.Kind)
	}
	if was || is || cannot || blind {
		a.publish()
	}
	if c == nil || c.Desired == nil && c.Record == nil {
		return // gone from Git and from the inventory
	}
	d := a.sess.Desired()
	log := a.log.With("resource", id, "revision", d.Revision())
	m := a.opts.Metrics
	if o.Verdict == diff.InSync {
		log.Debug("in sync")
		if c.Action == diff.NoOp && c.Record == nil {
			log.Info("recorded: found on the host as desired")
		}
		a.unhint(id)
		return
	}
	drift := o.Drift()
	kind := "intentional"
	if drift {
		kind = "corrective"
	}
	switch o.Verdict {
	case diff.Waiting:
		log.Debug("waiting", "until", o.Until, "for", o.Err)
		return
	case diff.Refused:
		if drift {
			m.DriftDetected(c.Kind)
		}
		log.Info("not applied", "action", c.Action, "reason", c.Reason, "why", o.Err)
		return
	case diff.Blocked:
		a.seen(id, d.Revision())
		a.note(0, 1)
		log.Warn("blocked", "action", c.Action, "reason", c.Reason, "error", o.Err)
		return
	}
	h := a.seen(id, d.Revision())
	if o.Verdict == diff.Failed && c.Action == diff.NoOp {
		a.note(0, 1)
		log.Error("cannot observe or record", "error", o.Err)
		return
	}
	if drift {
		m.DriftDetected(c.Kind)
	}
	if o.Verdict == diff.Failed {
		m.ObserveApply(c.Kind, string(c.Action), ResultFailure)
		a.note(1, 1)
		log.Error("apply failed", "action", c.Action, "reason", c.Reason, "change", kind, "error", o.Err)
		return
	}
	m.ObserveApply(c.Kind, string(c.Action), ResultSuccess)
	m.ObserveConvergence(h.trigger, time.Since(h.seen))
	a.note(1, 0)
	log.Info("applied", "action", c.Action, "reason", c.Reason, "change", kind)
	if c.Desired == nil {
		a.fight.Forget(string(id)) // gone: no fight to report any more
	}
	if o.MadePaths() {
		a.rewatchOf(id) // new directories to watch
	}
	if drift {
		m.DriftCorrected(c.Kind)
		a.tell(events.Event{Severity: events.Info, Reason: events.DriftCorrected, Resource: string(id), Revision: d.Revision(),
			Message: fmt.Sprintf("%s put back to what Git says (%s: %s)", id, c.Reason, c.Action)})
		if f := a.fight.Record(string(id)); f.Fighting {
			log.Warn("fighting: something keeps undoing this resource; corrected once left alone", "corrections", f.Corrections, "settle", a.opts.FightSettle)
			a.fightStarted(id, f)
		}
	}
	if c.Action == diff.Restart {
		why := restartReason(c)
		m.ProcessRestarted(why)
		sev := events.Info
		if why == RestartCrash {
			sev = events.Warning
		}
		a.tell(events.Event{Severity: sev, Reason: events.ProcessRestarted, Resource: string(id), Revision: d.Revision(),
			Message: fmt.Sprintf("%s restarted by the agent (%s): %s", id, why, c.Reason)})
	}
	for _, dep := range a.sess.Dependents(id) {
		a.enqueue(dep) // it may have waited, or been blocked, on this one
	}
}

// rewatchOf asks for these keys' watches to be listed again once things
// settle: they made paths (or a parent of theirs came to be).
func (a *Agent) rewatchOf(ids ...resource.ID) {
	a.keys.mu.Lock()
	defer a.keys.mu.Unlock()
	for _, id := range ids {
		if !slices.Contains(a.keys.rewatch, id) {
			a.keys.rewatch = append(a.keys.rewatch, id)
		}
	}
}

// restartReason says why an applied restart happened, from the facts the
// driver observed.
func restartReason(c *diff.Change) RestartReason {
	switch {
	case c.Reason == diff.Crashed:
		return RestartCrash
	case c.Observed.InputsChanged:
		return RestartRestartOn
	}
	return RestartSpecChange
}

// errForeign holds changes back between a snapshot another cortex-sync
// saved and the agent's next fetch.
var errForeign = errors.New("the snapshot was saved by another cortex-sync (a sync by hand?): the source is fetched again before anything more is applied")

// foreignHold keeps the agent from applying its desired state over what
// another cortex-sync just applied, until it fetched the source again: a
// sync by hand may have applied a newer revision, which the agent would
// otherwise undo with its older one.
func (a *Agent) foreignHold(c *diff.Change, now time.Time) (time.Time, error) {
	if a.stateDir.foreign.Load() {
		return now.Add(100 * time.Millisecond), errForeign
	}
	return time.Time{}, nil
}

// fightHold is the engine's hold for a fighting resource: its next
// correction of drift waits out the fight's backoff.
func (a *Agent) fightHold(c *diff.Change, now time.Time) (time.Time, error) {
	if !c.IsDrift() {
		return time.Time{}, nil
	}
	if f := a.fight.Status(string(c.ID)); f.Fighting && now.Before(f.NotBefore) {
		return f.NotBefore, errFighting
	}
	return time.Time{}, nil
}

// passed notes that id was reconciled once (applied, failed or found
// waiting): the first reconcile is done once every key of the first
// revision was, so a key that keeps coming back (a command retried, a
// host that keeps drifting) cannot hold readiness hostage. Ready means
// watched too: what the first pass made (new directories included) is
// watched before the agent says it is ready, or an edit made just after
// would go unseen until the drift scan.
func (a *Agent) passed(id resource.ID) {
	a.keys.mu.Lock()
	if a.keys.firstPass == nil {
		a.keys.mu.Unlock()
		return
	}
	delete(a.keys.firstPass, id)
	if len(a.keys.firstPass) > 0 {
		a.keys.mu.Unlock()
		return
	}
	a.keys.firstPass = nil
	w := a.keys.watch
	a.keys.rewatch = nil
	a.keys.mu.Unlock()
	if w != nil {
		w.sync(a.sess.Watches())
	}
	a.keys.mu.Lock()
	a.keys.started = true
	a.keys.mu.Unlock()
}
