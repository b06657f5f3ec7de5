package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Converge converges one resource, the agent's unit of work: under the
// state lock it observes the host afresh, decides, gates, records what it
// is about to create, applies, and records the outcome and the attempt.
// The observation the verdict is reached on is the one the apply acts on.
func (s *Session) Converge(ctx context.Context, id resource.ID) diff.Outcome {
	return s.ConvergeIn(ctx, id, nil)
}

// ConvergeIn converges one resource looking only at scope: the entries of
// its tree (slash paths below its top, each with all below it) that an
// event named; nil looks at all of it. A kind without a tree looks at all
// of it whatever the scope.
func (s *Session) ConvergeIn(ctx context.Context, id resource.ID, scope []string) diff.Outcome {
	d := s.current()
	if d == nil {
		return diff.Outcome{Verdict: diff.InSync}
	}
	if err := s.w.Acquire(ctx); err != nil {
		return diff.Outcome{Verdict: diff.Failed, Change: &diff.Change{ID: id}, Err: fmt.Errorf("state lock: %w", err)}
	}
	defer s.w.Release()
	d = s.current() // a reload may have come with the lock
	r := d.Set.Get(id)
	rec := s.w.View().Find(string(id))
	if r == nil && rec == nil {
		return diff.Outcome{Verdict: diff.InSync} // gone from both: nothing to do
	}
	host := s.host(d)
	host.Env.Scope = scope
	c := diff.One(ctx, host, r, rec)
	return s.act(ctx, d, c)
}

// ApplyPlanned converges one change of a plan made in this session, under
// the lock a sync holds throughout: the plan's observation is the look
// that acts.
func (s *Session) ApplyPlanned(ctx context.Context, c *diff.Change) diff.Outcome {
	return s.act(ctx, s.current(), c)
}

// act gates, intends, applies and records c. The state lock is held.
func (s *Session) act(ctx context.Context, d *Desired, c *diff.Change) diff.Outcome {
	switch {
	case c.Err != nil:
		return s.note(d, diff.Outcome{Verdict: diff.Failed, Change: c, Err: c.Err})
	case c.Suspended:
		return s.note(d, diff.Outcome{Verdict: diff.Refused, Change: c, Err: ErrDisabled})
	case !due(c):
		return s.note(d, diff.Outcome{Verdict: diff.InSync, Change: c})
	}
	now := time.Now()
	if o := s.gate(ctx, d, c, s.w.View(), now); o != nil {
		return s.note(d, *o)
	}
	if s.current() != d {
		// A newer desired state was adopted while this change was planned
		// (the agent fetched again, after a snapshot another cortex-sync
		// saved): acting on the old one would undo what the new one says.
		// The adoption queued what it changed; this one looks again.
		return diff.Outcome{Verdict: diff.Waiting, Change: c, Err: ErrSuperseded, Until: now}
	}
	if c.Action == diff.Forget {
		// Left on the host as it is: only the record goes.
		s.w.Update(func(snap *state.Snapshot) { snap.Drop(string(c.ID)) })
		return s.note(d, diff.Outcome{Verdict: diff.Applied, Change: c})
	}
	if creates(c) {
		if err := s.intend(ctx, d, c); err != nil {
			return s.note(d, diff.Outcome{Verdict: diff.Failed, Change: c, Err: fmt.Errorf("record what is about to be created: %w", err)})
		}
	}
	// An apply begun is finished even when the caller is told to stop: a
	// mirror cut short would leave the host half updated until next time.
	entry, err := s.host(d).Apply(context.WithoutCancel(ctx), c)
	took := time.Since(now)
	if err != nil {
		err = fmt.Errorf("%s %s: %w", c.Action, c.ID, err)
		if c.Prune {
			err = fmt.Errorf("prune %s: %w", c.ID, err)
		}
	}
	s.w.Update(func(snap *state.Snapshot) {
		record(snap, d.Set, c, entry, err)
		settled(snap, c.ID)
	})
	v := diff.Applied
	switch {
	case err != nil:
		v = diff.Failed
	case c.Action == diff.NoOp:
		v = diff.InSync // found as desired, and recorded
	}
	return s.note(d, diff.Outcome{Verdict: v, Change: c, Err: err, Duration: took})
}

// note keeps the snapshot's last attempt current with one outcome: a
// failure or a block is listed (status shows it even for a resource never
// applied), a success takes it off. The attempt is replaced, never changed
// in place: a view copied the snapshot and may read the old one.
func (s *Session) note(d *Desired, o diff.Outcome) diff.Outcome {
	c := o.Change
	if c == nil || c.ID == "" {
		return o
	}
	if o.Verdict == diff.Waiting && o.Until.IsZero() && s.oneShot {
		o.Verdict = diff.Blocked // what it waits for will not come in this run
	}
	s.markDone(c.ID, d, o.Verdict == diff.Applied || o.Verdict == diff.InSync)
	if o.Verdict == diff.Applied {
		s.mu.Lock()
		s.applied[c.ID] = time.Now()
		s.mu.Unlock()
	}
	var f *state.Failure
	kept := false
	switch o.Verdict {
	case diff.Failed, diff.Blocked:
		f = &state.Failure{ID: string(c.ID), Kind: c.Kind, Path: c.Path, Action: string(c.Action), Error: o.Err.Error(), BlockedBy: string(o.BlockedBy)}
	case diff.Applied, diff.InSync:
	case diff.Refused:
		if !errors.Is(o.Err, ErrPruneOff) && !errors.Is(o.Err, ErrReservedPrune) || s.w.Attempt().Keeps(d.Revision(), string(c.ID)) {
			return o
		}
		kept = true // status says the host does not match Git
	default:
		return o // waiting: nothing new to say of it
	}
	id := string(c.ID)
	s.w.Update(func(snap *state.Snapshot) {
		a := &state.Attempt{Revision: d.Revision(), Time: time.Now().UTC().Truncate(time.Millisecond)}
		if old := snap.LastAttempt; old != nil && old.Revision == a.Revision {
			a.Failed = slices.DeleteFunc(slices.Clone(old.Failed), func(x state.Failure) bool { return x.ID == id })
			a.Kept = slices.DeleteFunc(slices.Clone(old.Kept), func(x string) bool { return x == id })
		}
		if f != nil {
			a.Failed = append(a.Failed, *f)
		}
		if kept {
			a.Kept = append(a.Kept, id)
		}
		snap.LastAttempt = a
	})
	return o
}

// due reports whether c needs the apply step: a pending change, or a
// resource found on the host as desired whose record is missing or out of
// date (there before; or made, or mirrored, by a run killed before it
// recorded it). That one is applied as the no-op it is, which records it:
// it enters the inventory (as created when its creation was intended), its
// recorded spec is the one applied, a tree index holds every file
// cortex-sync wrote.
func due(c *diff.Change) bool {
	if c.Pending() {
		return true
	}
	o := &c.Observed
	return c.Err == nil && !c.Suspended && c.Desired != nil && o.Desired && (c.Record == nil || o.GitChanged || o.Stale)
}

// creates reports whether applying c makes something new on the host.
func creates(c *diff.Change) bool {
	return c.Pending() && c.Desired != nil && c.Record == nil && !c.Observed.Exists
}

// intend names c in the snapshot's creations, with every other creation
// the revision still owes, and saves it before the host is touched: a run
// killed between a creation and its record must not forget it made the
// thing (prune would never delete it). Only resources without a record are
// looked at, so a burst of creations costs one save, not one each.
func (s *Session) intend(ctx context.Context, d *Desired, c *diff.Change) error {
	snap := s.w.View()
	if snap.Intended(string(c.ID), c.Path) {
		return nil
	}
	creating := []state.Creation{{ID: string(c.ID), Path: c.Path}}
	host := s.host(d)
	for _, r := range d.Set.Resources() {
		if r.ID() == c.ID || snap.Find(string(r.ID())) != nil {
			continue
		}
		if o := diff.One(ctx, host, r, nil); creates(o) && !snap.Intended(string(o.ID), o.Path) {
			creating = append(creating, state.Creation{ID: string(o.ID), Path: o.Path})
		}
	}
	added := false
	s.w.Update(func(snap *state.Snapshot) { added = snap.Intend(creating) })
	if !added {
		return nil
	}
	return s.w.Save()
}

// settled drops id's creation once its record is in the inventory.
func settled(snap *state.Snapshot, id resource.ID) {
	if len(snap.Creating) == 0 || snap.Find(string(id)) == nil {
		return
	}
	snap.Creating = slices.DeleteFunc(slices.Clone(snap.Creating), func(k state.Creation) bool { return k.ID == string(id) })
	if len(snap.Creating) == 0 {
		snap.Creating = nil
	}
}

// record keeps the outcome of one change in the snapshot: the new record,
// its dependencies as applied, and the result; a failure keeps the old
// record (nothing is orphaned) with the error.
func record(snap *state.Snapshot, set *resource.Set, c *diff.Change, entry *state.Entry, err error) {
	now := time.Now().UTC()
	switch {
	case entry == nil:
	case c.Desired != nil:
		recordDeps(entry, set.Deps(c.ID))
	case c.Record != nil && entry != c.Record:
		entry.DependsOn = c.Record.DependsOn // a failed prune keeps what it knew
	}
	if entry != nil && c.Desired != nil && c.Record == nil && snap.Intended(string(c.ID), c.Path) {
		entry.Created = true // made by this run, or by one killed before recording it
	}
	switch {
	case err != nil:
		result := &state.Result{Action: string(c.Action), Error: err.Error(), Time: now}
		if entry != nil {
			entry.Result = result
			snap.Put(entry)
		} else if c.Record != nil {
			kept := *c.Record // a new entry: the old may still be read
			kept.Result = result
			snap.Put(&kept)
		}
	case entry == nil:
		snap.Drop(string(c.ID))
	default:
		if c.Action == diff.NoOp && c.Record != nil && c.Record.Result != nil && c.Record.Result.Error == "" {
			entry.Result = c.Record.Result // found as desired: the last apply stands
		}
		if entry.Result == nil {
			entry.Result = &state.Result{Action: string(c.Action), Time: now}
		}
		snap.Put(entry)
	}
}

// recordDeps notes on e what its resource depends on, so a prune can stop
// dependents first once it has left Git.
func recordDeps(e *state.Entry, deps []resource.ID) {
	e.DependsOn = nil
	for _, d := range deps {
		e.DependsOn = append(e.DependsOn, string(d))
	}
}
