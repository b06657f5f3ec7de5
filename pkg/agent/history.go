package agent

import (
	"context"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Reconcile is one reconcile of the agent: from a change being seen (a new
// revision, drift, a process exit, a request) until every key it queued
// has converged.
type Reconcile struct {
	Trigger  Trigger       `json:"trigger"`
	Revision string        `json:"revision,omitempty"`
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration"` // zero while it runs
	Changes  int           `json:"changes"`
	Errors   int           `json:"errors"`
}

const historyLen = 20

// begin opens a reconcile, unless one is running: then the new trigger is
// part of it.
func (a *Agent) begin(t Trigger, revision string, start time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.episode == nil {
		a.episode = &Reconcile{Trigger: t, Revision: revision, Start: start}
	}
}

// hint queues a key because something was seen (after delay, so a burst
// of events settles first), remembering what, for the reconcile it starts.
func (a *Agent) hint(id resource.ID, t Trigger, delay time.Duration) {
	a.mu.Lock()
	if _, ok := a.hints[id]; !ok {
		a.hints[id] = hintOf{t, time.Now()}
	}
	a.mu.Unlock()
	if delay > 0 {
		a.queue.AddAfter(id, delay)
	} else {
		a.queue.Add(id)
	}
}

// hintOf is why a key was queued, and since when.
type hintOf struct {
	trigger Trigger
	seen    time.Time
}

// seen opens a reconcile for a key found pending, dated from when what it
// answers was seen.
func (a *Agent) seen(id resource.ID, revision string) {
	a.mu.Lock()
	h, ok := a.hints[id]
	delete(a.hints, id)
	a.mu.Unlock()
	if !ok {
		h = hintOf{TriggerDrift, time.Now()}
	}
	a.begin(h.trigger, revision, h.seen)
}

// unhint forgets why a key was queued: it was found in sync.
func (a *Agent) unhint(id resource.ID) {
	a.mu.Lock()
	delete(a.hints, id)
	a.mu.Unlock()
}

// note counts changes and errors into the running reconcile.
func (a *Agent) note(changes, errs int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.episode != nil {
		a.episode.Changes += changes
		a.episode.Errors += errs
	}
}

// settle closes the running reconcile when nothing is left to do: the
// queue is empty and no key is in flight or waiting.
func (a *Agent) settle() {
	if a.queue.Len() > 0 || a.inflight.Load() > 0 {
		return
	}
	a.wmu.Lock()
	busy := a.holders > 0 || a.lock != nil
	a.wmu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if !busy && a.rewatch && a.desired != nil && a.watch != nil {
		a.rewatch = false
		w, set := a.watch, a.desired.Set
		a.mu.Unlock()
		w.sync(set)
		a.mu.Lock()
	}
	e := a.episode
	if busy || e == nil {
		return
	}
	e.Duration = time.Since(e.Start)
	a.episode = nil
	a.started = true
	if e.Changes+e.Errors == 0 && (e.Trigger == TriggerDrift || e.Trigger == TriggerProcessExit) {
		return // our own writes seen, or a process that needed nothing
	}
	a.history = append(a.history, *e)
	if len(a.history) > historyLen {
		a.history = a.history[len(a.history)-historyLen:]
	}
	if a.gauging.CompareAndSwap(false, true) {
		a.bg.Go(func() { // the resources gauges follow every reconcile
			defer a.gauging.Store(false)
			a.Status(context.Background())
		})
	}
	result := ResultSuccess
	if e.Errors > 0 {
		result = ResultFailure
	} else if a.desired != nil {
		// Converged: the revision counts as applied, as a sync records it.
		snap := a.sess.Snapshot
		snap.LastSyncTime = time.Now().UTC().Truncate(time.Millisecond)
		if snap.LastAttempt == nil || len(snap.LastAttempt.Failed) == 0 {
			snap.Revision = a.desired.Revision()
			snap.LastAttempt = &state.Attempt{Revision: snap.Revision, Time: snap.LastSyncTime}
		}
		a.bg.Go(func() {
			a.markDirty()
			if err := a.flush(); err != nil {
				a.log.Error("save snapshot", "error", err)
			}
			a.pruneBackups()
		})
	}
	m := a.opts.Metrics
	m.ObserveReconcile(e.Trigger, result, e.Duration)
	if e.Errors == 0 {
		m.ObserveConvergence(e.Trigger, e.Duration)
		m.ObserveApplied(e.Revision, time.Now())
	}
}

// Conditions are the agent's state at a glance, as Flux reports them.
type Conditions struct {
	Ready       bool   `json:"ready"`
	Reconciling bool   `json:"reconciling"`
	Stalled     bool   `json:"stalled"` // the source fails, or the revision is invalid
	Message     string `json:"message,omitempty"`
}

// Status is /api/v1/status: the status document of status -o json, and
// the agent's own state.
type Status struct {
	*reconcile.Status
	Conditions Conditions  `json:"conditions"`
	Suspended  bool        `json:"suspended"`
	Fighting   []string    `json:"fighting,omitempty"`
	Reconciles []Reconcile `json:"reconciles"`
}

// Status observes the host against the current revision and reports.
func (a *Agent) Status(ctx context.Context) *Status {
	a.mu.Lock()
	if a.sess == nil {
		a.mu.Unlock()
		return &Status{Status: &reconcile.Status{}, Conditions: Conditions{Message: "starting"}}
	}
	sess := *a.sess // a view: its own snapshot copy, the current revision
	sess.Snapshot = a.sess.Snapshot.WithInventory(append(a.sess.Snapshot.Inventory[:0:0], a.sess.Snapshot.Inventory...))
	sess.Desired = a.desired
	env := *a.sess.Env
	env.Snapshot = sess.Snapshot
	if a.desired != nil {
		env.Tree, env.Set = a.desired.Checkout.Tree, a.desired.Set
	}
	sess.Env = &env
	st := &Status{Suspended: a.suspended, Reconciles: append([]Reconcile(nil), a.history...)}
	st.Conditions.Reconciling = a.episode != nil
	if a.fetchErr != nil {
		st.Conditions.Stalled, st.Conditions.Message = true, a.fetchErr.Error()
	}
	a.mu.Unlock()
	st.Status = sess.Status(ctx)
	st.Fighting = a.fight.Fighting()
	ready, why := a.Ready()
	st.Conditions.Ready = ready && st.Status.Converged()
	if st.Conditions.Message == "" {
		st.Conditions.Message = why
	}
	states := make([]ResourceState, 0, len(st.Resources))
	fighting := map[string]bool{}
	for _, id := range st.Fighting {
		fighting[id] = true
	}
	for _, r := range st.Resources {
		states = append(states, ResourceState{Kind: r.Kind, Sync: r.Sync, Health: r.Health, Fighting: fighting[r.ID]})
	}
	a.opts.Metrics.SetResources(states)
	return st
}
