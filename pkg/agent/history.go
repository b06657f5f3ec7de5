package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// Reconcile is one reconcile of the agent: from a change being seen (a new
// revision, drift, a process exit, a request) until every key it queued
// has converged.
type Reconcile struct {
	Trigger  Trigger       `json:"trigger"`
	Revision string        `json:"revision,omitempty"`
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"-"` // zero while it runs; "duration" in seconds
	Changes  int           `json:"changes"`
	Errors   int           `json:"errors"`
}

// MarshalJSON writes the duration in seconds.
func (r Reconcile) MarshalJSON() ([]byte, error) {
	type plain Reconcile
	return json.Marshal(struct {
		plain
		Duration float64 `json:"duration"`
	}{plain(r), r.Duration.Seconds()})
}

const historyLen = 20

// begin opens a reconcile, unless one is running: then the new trigger is
// part of it.
func (a *Agent) begin(t Trigger, revision string, start time.Time) {
	a.keys.mu.Lock()
	defer a.keys.mu.Unlock()
	if a.keys.episode == nil {
		a.keys.episode = &Reconcile{Trigger: t, Revision: revision, Start: start}
	}
}

// hint queues a key because something was seen (after delay, so a burst
// of events settles first), remembering what, for the reconcile it starts.
func (a *Agent) hint(id resource.ID, t Trigger, delay time.Duration) {
	if t == TriggerDrift {
		a.fight.Disturbed(string(id))
	}
	a.keys.mu.Lock()
	if _, ok := a.keys.hints[id]; !ok {
		a.keys.hints[id] = hintOf{t, time.Now()}
	}
	a.keys.mu.Unlock()
	if delay > 0 {
		a.keys.queue.AddAfter(id, delay)
	} else {
		a.keys.queue.Add(id)
	}
}

// hintOf is why a key was queued, and since when.
type hintOf struct {
	trigger Trigger
	seen    time.Time
}

// seen opens a reconcile for a key found pending, dated from when what it
// answers was seen, and returns that: a convergence is timed from it.
func (a *Agent) seen(id resource.ID, revision string) hintOf {
	a.keys.mu.Lock()
	h, ok := a.keys.hints[id]
	delete(a.keys.hints, id)
	if !ok && a.keys.episode != nil {
		h, ok = hintOf{a.keys.episode.Trigger, a.keys.episode.Start}, true // queued by the running reconcile
	}
	a.keys.mu.Unlock()
	if !ok {
		h = hintOf{TriggerDrift, time.Now()}
	}
	a.begin(h.trigger, revision, h.seen)
	return h
}

// unhint forgets why a key was queued: it was found in sync.
func (a *Agent) unhint(id resource.ID) {
	a.keys.mu.Lock()
	delete(a.keys.hints, id)
	a.keys.mu.Unlock()
}

// note counts changes and errors into the running reconcile.
func (a *Agent) note(changes, errs int) {
	a.keys.mu.Lock()
	defer a.keys.mu.Unlock()
	if a.keys.episode != nil {
		a.keys.episode.Changes += changes
		a.keys.episode.Errors += errs
	}
}

// settle closes the running reconcile when nothing is left to do: the
// queue is empty and no key is in flight or waiting.
func (a *Agent) settle() {
	if a.keys.queue.Len() > 0 || a.keys.inflight.Load() > 0 {
		return
	}
	s := a.session()
	if s == nil {
		return
	}
	a.lookNow() // the revision on trial may be good, or bad, now
	busy := !s.Writer().Idle()
	a.keys.mu.Lock()
	defer a.keys.mu.Unlock()
	if !busy && len(a.keys.rewatch) > 0 && a.keys.watch != nil {
		ids, w := a.keys.rewatch, a.keys.watch
		a.keys.rewatch = nil
		a.keys.mu.Unlock()
		w.update(ids, s.WatchesOf(ids))
		a.keys.mu.Lock()
	}
	e := a.keys.episode
	if busy || e == nil {
		return
	}
	e.Duration = time.Since(e.Start)
	a.keys.episode = nil
	a.keys.started = true
	if e.Changes+e.Errors == 0 && (e.Trigger == TriggerDrift || e.Trigger == TriggerProcessExit) {
		return // our own writes seen, or a process that needed nothing
	}
	a.keys.history = append(a.keys.history, *e)
	if len(a.keys.history) > historyLen {
		a.keys.history = a.keys.history[len(a.keys.history)-historyLen:]
	}
	result := ResultSuccess
	if e.Errors > 0 {
		result = ResultFailure
	}
	waiting := 0
	for _, o := range a.keys.held {
		if o.Verdict != diff.Refused {
			waiting++
		}
	}
	converged := e.Errors == 0 && waiting == 0
	d := s.Desired() // what this pass converged to
	a.bg.Go(func() {
		// The revision counts as applied once all of it converged, as a
		// sync records it; the snapshot is saved, and the retention runs.
		before := s.View().Revision
		if s.SettleFor(d, converged) && converged {
			a.lookNow() // applied in full: the revision on trial may be judged
			if before != d.Revision() {
				a.appliedYet(d.Revision())
			}
			s.Writer().Retain(a.opts.Retention, retentionEvery)
			a.rolledBackYet()
		}
		if err := s.Writer().Flush(context.Background()); err != nil {
			a.log.Error("save snapshot", "error", err)
		}
	})
	a.pokeFleet()
	m := a.opts.Metrics
	m.ObserveReconcile(e.Trigger, result, e.Duration)
	if e.Errors == 0 {
		m.ObserveApplied(e.Revision, time.Now())
	}
}

// retentionEvery bounds how often the agent applies the backup retention:
// backups come only from overwriting what cortex-sync had not written, so
// they grow slowly, and a drifting host converges many times an hour.
const retentionEvery = time.Hour

// Conditions are the agent's state at a glance, as Flux reports them.
type Conditions struct {
	// Ready: the first reconcile is done, the source works, and the host
	// is converged (what /readyz says, and that the host is converged).
	Ready       bool `json:"ready"`
	Reconciling bool `json:"reconciling"`
	Stalled     bool `json:"stalled"` // the source fails, or the revision is invalid
	// PruneHeld says why what left Git is not pruned (an empty desired
	// set, another source, a rolled-back snapshot); empty when it is not.
	PruneHeld string `json:"pruneHeld,omitempty"`
	// Coordinator says, for a host in a fleet, that its etcd cannot be
	// reached and since when; empty while it answers. It does not make the
	// host unready: the host is healthy, and keeps healing.
	Coordinator string `json:"coordinator,omitempty"`
	// Watches says that directories go unwatched for want of inotify
	// watches (fs.inotify.max_user_watches), how many and since when;
	// empty while every one is watched. It does not make the host
	// unready: the drift scan heals what the watches miss, later.
	Watches string `json:"watches,omitempty"`
	Message string `json:"message,omitempty"`
}

// Status is /api/v1/status: the status document of status -o json (with
// the agent's report), and the agent's conditions and last reconciles.
type Status struct {
	*reconcile.Status
	Conditions Conditions  `json:"conditions"`
	Suspended  bool        `json:"suspended"`
	Fighting   []string    `json:"fighting,omitempty"`
	Reconciles []Reconcile `json:"reconciles"`
}

// Status observes the host against the current revision and reports.
func (a *Agent) Status(ctx context.Context) *Status {
	s := a.session()
	if s == nil {
		return &Status{Status: &reconcile.Status{}, Conditions: Conditions{Message: "starting"}}
	}
	report := a.report()
	a.keys.mu.Lock()
	st := &Status{Suspended: report.Suspended, Reconciles: append([]Reconcile(nil), a.keys.history...)}
	st.Conditions.Reconciling = a.keys.episode != nil
	a.keys.mu.Unlock()
	a.revs.mu.Lock()
	if a.revs.fetchErr != nil {
		st.Conditions.Stalled, st.Conditions.Message = true, "source failing: "+a.revs.fetchErr.Error()
	}
	if a.revs.refused != nil {
		st.Conditions.Stalled = true
	}
	a.revs.mu.Unlock()
	st.Status = s.Status(ctx)
	st.Status.Agent = report
	st.Conditions.PruneHeld = report.PruneHold
	if f := report.Fleet; f != nil {
		st.Conditions.Coordinator = f.Coordinator
	}
	if w := report.Watches; w != nil {
		st.Conditions.Watches = w.Condition
	}
	st.Fighting = a.fight.Fighting()
	ready, why := a.Ready()
	st.Conditions.Ready = ready && st.Status.Converged()
	if st.Conditions.Message == "" {
		st.Conditions.Message = why
	}
	switch pin := st.OnRollback; {
	case st.Conditions.Ready || st.Conditions.Message != "":
	case pin != nil:
		st.Conditions.Message = fmt.Sprintf("on a rollback: held on %s while the source's head is %s", pin.Revision, pin.Head)
		if pin.Reason != "" {
			st.Conditions.Message += " (" + pin.Reason + ")"
		}
	case st.Conditions.PruneHeld != "":
		st.Conditions.Message = "prune held: " + st.Conditions.PruneHeld
	default:
		st.Conditions.Message = "not converged: " + string(st.Status.Sync) + ", " + string(st.Status.Health)
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

// report is what the agent knows beyond the snapshot, as status shows it.
func (a *Agent) report() *reconcile.AgentReport {
	s := a.session()
	r := &reconcile.AgentReport{Agent: supervise.Self(), Since: a.pub.since, Written: time.Now().UTC().Truncate(time.Millisecond)}
	if l := a.pub.address.Load(); l != nil {
		r.Address, r.TokenFile = l.addr, l.tokenFile
	}
	for _, o := range a.opts.Engine.Own {
		if abs, err := filepath.Abs(o.Path); err == nil {
			r.Own = append(r.Own, reconcile.Own{Path: abs, What: o.What})
		}
	}
	if s == nil {
		return r
	}
	if d := s.Desired(); d != nil {
		r.Revision = d.Revision()
	}
	r.Suspended = s.Suspended()
	r.Fleet = a.fleetReport()
	if c := a.Watches(); c.Watched+c.Unwatched > 0 {
		r.Watches = &reconcile.WatchReport{Directories: c.Watched, Unwatched: c.Unwatched, Since: c.Since, Error: c.Err, Condition: c.Condition(a.opts.DriftInterval)}
	}
	if err := s.PruneHold(); err != nil {
		r.PruneHold = err.Error()
	}
	for _, id := range a.fight.Fighting() {
		f := a.fight.Status(id)
		r.Fighting = append(r.Fighting, reconcile.Fight{ID: id, Corrections: f.Corrections, NotBefore: f.NotBefore})
	}
	a.revs.mu.Lock()
	r.Refused = a.revs.refused
	r.HeldBack = a.revs.heldBack
	if a.revs.fetchErr != nil {
		r.SourceError = a.revs.fetchErr.Error()
	}
	a.revs.mu.Unlock()
	a.keys.mu.Lock()
	for id, o := range a.keys.held {
		h := reconcile.Held{ID: string(id), Verdict: string(o.Verdict), Until: o.Until}
		if o.Err != nil {
			h.Reason = o.Err.Error()
		}
		switch {
		case errors.Is(o.Err, reconcile.ErrPruneOff):
			h.Verdict = "kept" // a policy's choice, not a refusal of the revision
		case errors.Is(o.Err, reconcile.ErrSuspended):
			h.Verdict, h.Reason = "notCorrected", "suspended" // the agent's choice: nothing refused it
		case errors.Is(o.Err, reconcile.ErrDisabled):
			h.Verdict = "notCorrected" // annotated, or stopped by hand
		}
		r.Held = append(r.Held, h)
	}
	for id, err := range a.keys.unobserved {
		r.Unobserved = append(r.Unobserved, reconcile.Held{ID: string(id), Reason: err.Error()})
	}
	a.keys.mu.Unlock()
	byID := func(x, y reconcile.Held) int { return strings.Compare(x.ID, y.ID) }
	slices.SortFunc(r.Held, byID)
	slices.SortFunc(r.Unobserved, byID)
	return r
}

// publishDelay gathers a burst of changes into one write of the report.
const publishDelay = 100 * time.Millisecond

// publish writes the agent's report to the state dir soon, where status
// reads it: a burst of changes is one write.
func (a *Agent) publish() {
	a.pub.mu.Lock()
	defer a.pub.mu.Unlock()
	if a.pub.publishing != nil || a.pub.unpublished || a.session() == nil {
		return
	}
	a.pub.publishing = time.AfterFunc(publishDelay, a.publishNow)
}

// publishNow writes the report at once: what a user reads next (a refused
// revision, a suspend) is already there.
func (a *Agent) publishNow() {
	a.pub.mu.Lock()
	if a.pub.publishing != nil {
		a.pub.publishing.Stop()
		a.pub.publishing = nil
	}
	stop := a.pub.unpublished || a.session() == nil
	a.pub.mu.Unlock()
	if stop {
		return
	}
	a.pokeFleet()
	a.pub.wpub.Lock()
	defer a.pub.wpub.Unlock()
	if err := reconcile.WriteAgentReport(a.sess.State, a.report()); err != nil {
		a.log.Warn("write the agent's report for status", "error", err)
	}
}

// unpublish removes the report: no agent runs on the state dir any more.
func (a *Agent) unpublish() {
	a.pub.mu.Lock()
	if a.pub.publishing != nil {
		a.pub.publishing.Stop()
		a.pub.publishing = nil
	}
	a.pub.unpublished = true
	a.pub.mu.Unlock()
	a.pub.wpub.Lock() // a write under way ends first
	defer a.pub.wpub.Unlock()
	if err := reconcile.RemoveAgentReport(a.sess.State); err != nil {
		a.log.Warn("remove the agent's report", "error", err)
	}
}
