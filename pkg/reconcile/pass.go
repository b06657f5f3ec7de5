package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Plan observes every resource against the desired state and decides: the
// plan diff shows and sync applies. Without a desired state (status with no
// source) it is the one last applied, recalled from the snapshot; a record
// that cannot be recalled is a change carrying why.
func (s *Session) Plan(ctx context.Context) *diff.Plan {
	d := s.current()
	host := s.host(d)
	view := host.Env.Snapshot
	if d == nil {
		set, snap, unknown := host.RecallAll(view)
		host.Env.Set = set
		plan := diff.Make(ctx, host, set, snap, s.Config.Concurrency)
		plan.Changes = append(plan.Changes, unknown...)
		plan.Source, plan.Revision = view.Source, view.Revision
		return plan
	}
	plan := diff.Make(ctx, host, d.Set, view, s.Config.Concurrency)
	plan.Source, plan.Revision = d.Ref, d.Revision()
	return plan
}

// Check is the refusal a sync of plan under the session's policy would
// meet before it touches anything.
func (s *Session) Check(plan *diff.Plan) error {
	d := s.current()
	return s.Policy.Check(plan, d.Set, s.w.Snapshot(), d.Ref)
}

// Sync applies the plan under the session's policy and records it: every
// outcome in the inventory, the attempt with what did not apply, and the
// revision as applied only when all of it was. The session must have been
// opened to write. Retention, when set, applies once all of it was.
func (s *Session) Sync(ctx context.Context, plan *diff.Plan, retention state.Retention) (*apply.Report, error) {
	if err := s.acceptRollback(); err != nil {
		return nil, err
	}
	if err := s.Check(plan); err != nil {
		return nil, err
	}
	d := s.current()
	s.w.Update(func(snap *state.Snapshot) { snap.Source = d.Ref })
	// What the plan creates is named before the host is touched, in one
	// save: a kill between a creation and its record must not make
	// cortex-sync forget it created the thing.
	var creating []state.Creation
	for _, c := range plan.Changes {
		if creates(c) {
			creating = append(creating, state.Creation{ID: string(c.ID), Path: c.Path})
		}
	}
	added := false
	s.w.Update(func(snap *state.Snapshot) { added = snap.Intend(creating) })
	if added {
		if err := s.w.Save(); err != nil {
			return nil, err
		}
	}
	s.oneShot = true
	rep, err := apply.Run(ctx, s, d.Set, plan, apply.Options{Concurrency: s.Config.Concurrency, Log: s.log()})
	if err != nil {
		return rep, err
	}
	applied := s.Settle(!rep.Failed())
	if err := s.w.Save(); err != nil {
		return rep, err
	}
	if applied {
		s.w.Retain(retention, 0)
	}
	return rep, nil
}

// Save implements apply.Converger: the snapshot is saved between groups.
func (s *Session) Save() error { return s.w.Save() }

// Settle ends a pass over the current revision: what its creations owe
// is settled, and when all of it converged (converged, and the last
// attempt lists no failure) the revision counts as applied. It reports
// whether it does.
func (s *Session) Settle(converged bool) bool {
	return s.SettleFor(s.current(), converged)
}

// SettleFor is Settle for desired state d, the one a pass converged to:
// nothing when another was adopted since, so a revision never counts as
// applied for its predecessor's pass.
func (s *Session) SettleFor(d *Desired, converged bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d == nil || d != s.desired {
		return false
	}
	applied := false
	s.w.Update(func(snap *state.Snapshot) {
		snap.Settle(func(id string) bool { return d.Set.Get(resource.ID(id)) != nil })
		now := time.Now().UTC().Truncate(time.Millisecond)
		snap.LastSyncTime = now
		a := snap.LastAttempt
		if a == nil || a.Revision != d.Revision() {
			a = &state.Attempt{Revision: d.Revision(), Time: now}
			snap.LastAttempt = a
		}
		if converged && len(a.Failed) == 0 {
			snap.Revision, applied = d.Revision(), true
		}
	})
	return applied
}

// SetDesired makes d the desired state (a new revision) and returns the
// previous one, for the caller to close once no change uses it any more.
// The snapshot records d's source at once unless a prune hold stands: then
// the old one stays, and every prune is refused until the user allows it.
func (s *Session) SetDesired(d *Desired) *Desired {
	s.mu.Lock()
	old := s.desired
	s.desired = d
	s.mu.Unlock()
	s.w.Update(func(snap *state.Snapshot) {
		if snap.Source != d.Ref && (len(snap.Inventory) == 0 || s.Policy.AllowSourceChange || !leaving(d.Set, snap)) {
			snap.Source = d.Ref
		}
		// Creations intended for what left Git are owed no more.
		snap.Settle(func(id string) bool { return d.Set.Get(resource.ID(id)) != nil })
	})
	return old
}

// PruneHold is why prune is held for the current revision, nil when it
// is not: what status and /readyz report.
func (s *Session) PruneHold() error {
	d := s.current()
	if d == nil || !s.Policy.Prune {
		return nil
	}
	snap := s.w.View()
	if !leaving(d.Set, snap) {
		return nil
	}
	return s.Policy.pruneHold(d.Set, snap, d.Ref)
}

// leaving reports whether anything in the inventory left the desired set
// and would be pruned.
func leaving(set *resource.Set, snap *state.Snapshot) bool {
	for _, e := range snap.Inventory {
		if !e.NoPrune && set.Get(resource.ID(e.ID)) == nil {
			return true
		}
	}
	return false
}

// acceptRollback takes a rolled-back snapshot as current when the policy
// says so; without it, a sync that would prune is refused.
func (s *Session) acceptRollback() error {
	rb := s.w.Snapshot().Rollback()
	switch {
	case rb == nil:
		return nil
	case s.Policy.AcceptRollback:
		if err := s.w.AcceptRollback(); err != nil {
			return err
		}
		snap := s.w.Snapshot()
		s.log().Warn("state rollback accepted", "serial", snap.Serial, "lineage", snap.Lineage)
		return nil
	case s.Policy.Prune:
		return fmt.Errorf("refusing to prune: %w", rb)
	}
	s.log().Warn("state rolled back; prune refused until accepted", "error", rb)
	return nil
}

func (s *Session) log() *slog.Logger {
	if s.Config.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Config.Log
}

// WaitHealthy waits until what the sync applied (ids) and turns healthy
// after its apply is Healthy, up to timeout; it lists what is not, and why.
func (s *Session) WaitHealthy(ctx context.Context, ids []resource.ID, timeout time.Duration) []string {
	return apply.WaitHealthy(ctx, s.Host(), s.w.Snapshot(), ids, timeout)
}
