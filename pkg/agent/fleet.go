package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// The agent as a host of a fleet. The agent knows no etcd: a Coordinator
// (pkg/fleetagent, over etcd) is the fleet as the agent uses it. The
// agent tells it what it fetched and how the host is; it asks it, through
// the revision gate, before applying a new revision; it names the
// singletons its desired set has. Healing the revision the host is on,
// and restarts to its spec, never ask anything.

// Coordinator is the fleet the agent is a host of.
type Coordinator interface {
	// The rollout's slot: Admit is asked before a new revision is
	// applied (after Fetched told of it); Judged hears its verdict.
	reconcile.RevisionGate
	// Fetched tells of the source's newest revision before it is
	// admitted.
	Fetched(Fetched)
	// Wake delivers when a revision held back may be admitted now (the
	// rollout moved, a hold ended): the agent asks again at once rather
	// than at its next poll.
	Wake() <-chan struct{}
	// Report gives the host's state; the coordinator writes it when it
	// changed, debounced, never once per reconcile.
	Report(HostState)
	// Suspended says the agent applies nothing (true) or again (false):
	// a suspended host takes no slot and gives back the one it holds.
	Suspended(bool)
	// Singletons are the names of the singletons of the desired set: the
	// coordinator campaigns for each, and fences what it does not hold.
	Singletons(names []string)
	// Info is the host's part in the fleet, for its status.
	Info() reconcile.FleetReport
	// Document is the fleet as etcd knows it: /api/v1/fleet.
	Document(ctx context.Context) (any, error)
}

// Fetched is a revision the agent fetched, as the fleet needs it.
type Fetched struct {
	Revision string
	// Fleet is the name in the revision's fleet.yaml ("" without one);
	// Rollout its rollout: (nil: none, every host applies the revision
	// when it fetches it).
	Fleet   string
	Rollout *resource.Rollout
	// Changes says whether the revision changes anything on this host:
	// one that changes nothing takes no slot.
	Changes bool
	// Seen is when this host first fetched it.
	Seen time.Time
}

// HostState is what the agent says of the host to its fleet.
type HostState struct {
	Revision  string // applied in full
	Head      string // the source's newest, as fetched
	HeadSeen  time.Time
	Sync      health.Sync
	Health    health.Status
	LastGood  string
	Fighting  []string
	LastError string
	Suspended bool
	// WindowOpens is when the deploy window the newest revision waits for
	// opens; zero when it waits for none.
	WindowOpens time.Time
}

// fleetEvery bounds how long a change of the host's health (a process
// that turned ready, or crashed) takes to reach the coordinator when
// nothing else pokes it.
const fleetEvery = time.Second

// pokeFleet has the host's state handed to the coordinator soon.
func (a *Agent) pokeFleet() {
	if a.opts.Fleet == nil {
		return
	}
	select {
	case a.revs.fleetPoke <- struct{}{}:
	default:
	}
}

// fleetLoop reports the host's state to the coordinator when poked, and
// every fleetEvery; and asks again for a revision held back when the
// coordinator wakes it.
func (a *Agent) fleetLoop(ctx context.Context) {
	f := a.opts.Fleet
	tick := time.NewTicker(fleetEvery)
	defer tick.Stop()
	var said string // the host's part in the fleet, as last published
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.Wake():
			a.exec(ctx, a.readmit)
			continue
		case <-a.revs.fleetPoke:
		case <-tick.C:
		}
		f.Report(a.hostState(ctx))
		a.coordinatorSaid(f.Info())
		// What status reads follows the coordinator (reachable or not, who
		// holds a singleton), though nothing else changed on the host.
		if info := fmt.Sprintf("%+v", f.Info()); info != said {
			said = info
			a.publish()
		}
	}
}

// hostState is the host as the fleet sees it: what it runs and how, from
// what the agent knows (no scan of files: the health of what reports one).
func (a *Agent) hostState(ctx context.Context) HostState {
	view := a.sess.View()
	d := a.sess.Desired()
	hs := HostState{Revision: view.Revision, Sync: health.Synced, Health: health.Healthy, Suspended: a.sess.Suspended(), Fighting: a.fight.Fighting(),
		WindowOpens: a.windowOpens()}
	if view.LastGood != nil {
		hs.LastGood = view.LastGood.Revision
	}
	a.keys.mu.Lock()
	busy := a.keys.episode != nil || len(a.keys.held) > 0 || len(a.keys.unobserved) > 0
	a.keys.mu.Unlock()
	a.revs.mu.Lock()
	hs.Head, hs.HeadSeen = a.revs.head, a.revs.headSeen
	switch {
	case a.revs.refused != nil:
		hs.LastError = a.revs.refused.Summary()
		// The source's newest is the revision refused: the fleet is not on
		// its head while every host refuses it.
		hs.Head, hs.HeadSeen = a.revs.refused.Revision, a.revs.refused.Since
	case a.revs.fetchErr != nil:
		hs.LastError = "source failing: " + a.revs.fetchErr.Error()
	}
	a.revs.mu.Unlock()
	if busy || a.keys.queue.Len() > 0 || a.keys.inflight.Load() > 0 || d == nil || d.Revision() != view.Revision {
		hs.Sync = health.OutOfSync
	}
	if at := view.LastAttempt; hs.LastError == "" && at != nil && len(at.Failed) > 0 {
		hs.LastError = at.Failed[0].ID + ": " + at.Failed[0].Error
	}
	if a := view.Latest(view.Revision); hs.LastError == "" && a != nil && a.Verdict == state.Bad {
		hs.LastError = "revision bad: " + a.Reason
	}
	if d != nil {
		host := a.sess.Host()
		for _, r := range d.Set.Resources() {
			rec := view.Find(string(r.ID()))
			if rec == nil {
				continue
			}
			if rep, ok := host.Ready(ctx, rec); ok && rep.Health != health.Suspended {
				hs.Health = health.Worst(hs.Health, rep.Health)
			}
		}
	}
	return hs
}

// fetched tells the coordinator of d, the source's newest revision, and
// returns what it changes on the host, for adopt.
func (a *Agent) fetched(d, old *reconcile.Desired) *changes {
	c := &changes{}
	c.keys, c.scopes = a.sess.Changed(old, d)
	f := Fetched{Revision: d.Revision(), Changes: len(c.keys) > 0}
	if fl, err := resource.ReadFleet(d.Checkout.Tree); err == nil && fl != nil {
		f.Fleet = fl.Name
		if ro := fl.Spec.Rollout; ro != nil {
			if r, err := ro.Settle(); err == nil { // ReadFleet refused any other
				f.Rollout = &r
			}
		}
	}
	a.revs.mu.Lock()
	if a.revs.head != d.Revision() || a.revs.headSeen.IsZero() {
		a.revs.headSeen = time.Now().UTC()
	}
	f.Seen = a.revs.headSeen
	a.revs.rollouts[d.Revision()] = f.Rollout
	if f.Rollout != nil && f.Changes {
		a.revs.gated = d.Revision() // a slot is taken to apply it
	}
	for rev := range a.revs.rollouts {
		if len(a.revs.rollouts) > 8 && rev != d.Revision() && (old == nil || rev != old.Revision()) {
			delete(a.revs.rollouts, rev) // only the newest few are ever tried
		}
	}
	a.revs.mu.Unlock()
	a.opts.Fleet.Fetched(f)
	return c
}

// changes are what a revision changes on the host (reconcile.Changed).
type changes struct {
	keys   []resource.ID
	scopes map[resource.ID][]string
}

// trialPolicy gives the trial of a revision its fleet's rollout timing:
// in a fleet, the rollout's minReady and progressDeadline (those of the
// revision's own fleet.yaml) are every host's, and win over the agent's
// own; its health checks and onFailure stay the agent's.
func (a *Agent) trialPolicy(t *reconcile.Trial) {
	if a.opts.Fleet == nil {
		return
	}
	a.revs.mu.Lock()
	ro := a.revs.rollouts[t.Revision]
	a.revs.mu.Unlock()
	if ro != nil {
		t.MinReady, t.ProgressDeadline = ro.MinReady.Std(), ro.ProgressDeadline.Std()
	}
}

// ErrJudgingFirst: in a fleet, a host does not take a newer revision
// while the one it is on is still on trial under the fleet's rollout.
var ErrJudgingFirst = errors.New("judging the revision on trial first")

// judgeFirst is the agent's own revision gate in a fleet, asked before
// the coordinator: a host still judging revision N does not take N+1
// (nor its slot, nor its canary's place) until N's verdict is in. Taking
// N+1 mid-trial left N unjudged, so a bad N+1 rolled the host back to
// N-1, older than what the rest of the fleet ran (issue 30, 5c). The wait
// is bounded by N's progressDeadline; the verdict readmits N+1 at once.
type judgeFirst struct{ a *Agent }

func (g judgeFirst) Admit(_ context.Context, rev string) error {
	a := g.a
	a.revs.mu.Lock()
	t := a.revs.trial
	gated := t != nil && a.revs.rollouts[t.Revision] != nil
	a.revs.mu.Unlock()
	if !gated || t.Revision == rev {
		return nil
	}
	return fmt.Errorf("%w: revision %s waits until %s, on trial here since %s, is judged (the fleet's rollout judges one revision at a time per host)",
		ErrJudgingFirst, rev, t.Revision, t.Start.UTC().Format(time.RFC3339))
}

func (judgeFirst) Judged(string, state.Verdict, string) {}

// holdWaiting keeps d, a revision the coordinator did not admit yet, to
// ask again when it wakes the agent; a revision kept out by a rollback
// (a pin, a refusal) is not kept.
func (a *Agent) holdWaiting(d *reconcile.Desired, adm reconcile.Admission) bool {
	if a.opts.Fleet == nil || adm.Pin != "" || errors.Is(adm.Stay, reconcile.ErrRevisionRefused) || errors.Is(adm.Stay, reconcile.ErrRevisionHeld) {
		return false
	}
	a.revs.mu.Lock()
	old := a.revs.waiting
	a.revs.waiting = d
	a.revs.mu.Unlock()
	if old != nil && old != d {
		old.Close()
	}
	return true
}

// dropWaiting forgets the revision held back: a fetch brings another.
func (a *Agent) dropWaiting() {
	a.revs.mu.Lock()
	d := a.revs.waiting
	a.revs.waiting = nil
	a.revs.mu.Unlock()
	if d != nil {
		d.Close()
	}
}

// readmit asks again for the revision held back, on the poll loop: the
// coordinator said the rollout moved.
func (a *Agent) readmit(ctx context.Context) {
	a.revs.mu.Lock()
	d := a.revs.waiting
	a.revs.waiting = nil
	a.revs.mu.Unlock()
	if d == nil {
		return
	}
	old := a.sess.Desired()
	if old != nil && old.Revision() == d.Revision() {
		d.Close()
		return
	}
	a.offer(ctx, d, TriggerRevision, time.Now(), a.watcher(), nil)
	a.settle()
}

// singletons are the names of the desired set's singletons.
func singletons(d *reconcile.Desired) []string {
	var names []string
	for _, r := range d.Set.Resources() {
		if s, ok := r.Spec.(resource.Singular); ok && s.IsSingleton() {
			names = append(names, r.Metadata.Name)
		}
	}
	slices.Sort(names)
	return names
}

// fleetReport is the host's part in the fleet for the agent's report.
func (a *Agent) fleetReport() *reconcile.FleetReport {
	if a.opts.Fleet == nil {
		return nil
	}
	r := a.opts.Fleet.Info()
	return &r
}
