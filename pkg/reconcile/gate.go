package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Policy is what the user lets the engine do.
type Policy struct {
	Prune             bool // delete what left Git
	AllowEmpty        bool // prune even when the desired set is empty
	AllowSourceChange bool // prune even when the source changed
	// AcceptRollback trusts a snapshot older than the last one this state
	// dir wrote (a restored backup), and lets prune use its inventory.
	AcceptRollback bool
	// NoSelfHeal reports drift and never corrects it (--self-heal=false).
	NoSelfHeal bool
	// WaitTimeout bounds how long a dependent waits for a dependency it
	// follows to turn healthy after that dependency's apply.
	WaitTimeout time.Duration
	// Revisions is the health gate on a new revision (revisions.go).
	Revisions RevisionPolicy
}

// The gate's reasons (see diff: the outcome's vocabulary). A waiting,
// blocked or refused Outcome's Err wraps one of them (errors.Is), and so
// does a refused sync.
var (
	ErrSuspended          = diff.ErrSuspended
	ErrDisabled           = diff.ErrDisabled
	ErrSelfHealOff        = diff.ErrSelfHealOff
	ErrPruneOff           = diff.ErrPruneOff
	ErrEmptyPrune         = diff.ErrEmptyPrune
	ErrSourceChange       = diff.ErrSourceChange
	ErrReservedPrune      = diff.ErrReservedPrune
	ErrDependencyFailed   = diff.ErrDependencyFailed
	ErrDependencyPending  = diff.ErrDependencyPending
	ErrDependencyNotReady = diff.ErrDependencyNotReady
	ErrDependentFirst     = diff.ErrDependentFirst
)

// ErrSuperseded: a change planned against a desired state a newer one
// replaced before it was applied; it is planned again.
var ErrSuperseded = errors.New("a newer desired state was adopted while this change was planned: planned again")

// Hold is a policy from outside the engine that may hold a change back for
// a while (the agent's fight detector; a fleet's rollout slot): a zero
// until lets the change go.
type Hold func(c *diff.Change, now time.Time) (until time.Time, why error)

// gate decides whether c, a change that is due, may be applied now: nil
// lets it go, else the outcome says why not and until when. It reads snap
// (the snapshot as the change will be recorded in) and the host's health.
func (s *Session) gate(ctx context.Context, d *Desired, c *diff.Change, snap *state.Snapshot, now time.Time) *diff.Outcome {
	hold := func(v diff.Verdict, err error) *diff.Outcome { return &diff.Outcome{Verdict: v, Change: c, Err: err} }
	switch {
	case c.Suspended:
		return hold(diff.Refused, ErrDisabled)
	case s.suspended.Load():
		return hold(diff.Refused, ErrSuspended)
	case c.IsDrift() && s.Policy.NoSelfHeal:
		return hold(diff.Refused, ErrSelfHealOff)
	case c.Prune && !s.Policy.Prune:
		return hold(diff.Refused, ErrPruneOff)
	case c.Prune:
		if r, ok := resource.Reaches(s.reserved, c.Path); ok {
			return hold(diff.Refused, diff.Gated(ErrReservedPrune, "refusing to prune %s: it reaches %s, %s, which cortex-sync never deletes; it is kept", c.Path, r.Path, r.What))
		}
		if err := s.Policy.pruneHold(d.Set, snap, d.Ref); err != nil {
			return hold(diff.Refused, err)
		}
	}
	if o := s.depsGate(ctx, d, c, snap, now); o != nil {
		return o
	}
	for _, h := range s.holds {
		if until, why := h(c, now); !until.IsZero() && until.After(now) {
			return &diff.Outcome{Verdict: diff.Waiting, Change: c, Err: why, Until: until}
		}
	}
	return nil
}

// pruneHold is why no prune may run for this revision: a rolled-back
// snapshot, an empty desired set, a source other than the snapshot's. A
// snapshot with an inventory and no recorded source is no proof of the
// same source either.
func (p Policy) pruneHold(set *resource.Set, snap *state.Snapshot, ref state.Source) error {
	switch {
	case snap.Rollback() != nil && !p.AcceptRollback:
		return snap.Rollback()
	case set.Len() == 0 && len(snap.Inventory) > 0 && !p.AllowEmpty:
		return fmt.Errorf("%w, so all %s in the inventory would be deleted; check the source path, or pass --allow-empty if that is what you want", ErrEmptyPrune, count(len(snap.Inventory), "resource"))
	case snap.Source != ref && len(snap.Inventory) > 0 && !p.AllowSourceChange:
		return fmt.Errorf("%w (%s, now %s path %q); pass --allow-source-change if the host should follow the new source", ErrSourceChange, recordedSource(snap.Source), ref.URL, ref.Path)
	}
	return nil
}

// recordedSource names the source a snapshot records, for a refusal.
func recordedSource(s state.Source) string {
	if s.URL == "" {
		return "it records none"
	}
	return fmt.Sprintf("%s path %q", s.URL, s.Path)
}

// Check is the refusal a sync with policy p would meet before it touches
// anything: a rolled-back snapshot, an empty desired set to prune, a
// changed source that would prune what it does not declare. A new source
// that prunes nothing (the same repository at a new URL) is not refused.
func (p Policy) Check(plan *diff.Plan, set *resource.Set, snap *state.Snapshot, ref state.Source) error {
	if !p.Prune {
		return nil
	}
	err := p.pruneHold(set, snap, ref)
	if errors.Is(err, ErrSourceChange) {
		gone := prunes(plan)
		if len(gone) == 0 {
			return nil
		}
		return fmt.Errorf("%w: prune would delete %s it does not declare (%s)", err, count(len(gone), "resource"), few(gone, 3))
	}
	return err
}

// depsGate holds a change until what it depends on is applied and
// healthy; a prune, until what depends on it (or lies inside it) is gone.
// A dependency this engine applied is waited for, up to the wait timeout;
// one still not healthy past it, or that failed, blocks the change.
func (s *Session) depsGate(ctx context.Context, d *Desired, c *diff.Change, snap *state.Snapshot, now time.Time) *diff.Outcome {
	if c.Desired == nil {
		if user := pruneUser(c, d.Set, snap); user != "" {
			return &diff.Outcome{Verdict: diff.Waiting, Change: c, BlockedBy: resource.ID(user),
				Err: diff.Gated(ErrDependentFirst, "kept until %s, which depends on it or lies inside it, is deleted", user)}
		}
		return nil
	}
	host := s.Host()
	for _, dep := range d.Set.Deps(c.ID) {
		rec := snap.Find(string(dep))
		failure := snap.LastAttempt.FailureOf(string(dep))
		if failure != nil && (snap.LastAttempt.Revision != d.Revision() || (rec != nil && (rec.Result == nil || rec.Result.Error == ""))) {
			failure = nil // an older revision's, or cured since
		}
		blocked := func(err error) *diff.Outcome {
			return &diff.Outcome{Verdict: diff.Blocked, Change: c, BlockedBy: dep, Err: err}
		}
		switch {
		case failure != nil || (rec != nil && rec.Result != nil && rec.Result.Error != ""):
			return blocked(diff.Gated(ErrDependencyFailed, "its dependency %s did not apply", dep))
		case rec == nil && !s.done(dep, d):
			return &diff.Outcome{Verdict: diff.Waiting, Change: c, BlockedBy: dep, Err: diff.Gated(ErrDependencyPending, "its dependency %s is not applied yet", dep)}
		case rec == nil:
			continue // converged to nothing (declared absent)
		}
		r, ok := host.Ready(ctx, rec)
		if !ok || r.Health == health.Healthy {
			continue
		}
		// A dependency this engine applied is waited for, up to the wait
		// timeout after its apply; one it left alone is judged at once:
		// one that never gets ready must not cost every sync the timeout.
		applied, waited := s.appliedAt(dep)
		if !waited {
			applied = now.Add(-s.Policy.WaitTimeout)
		}
		deadline := applied.Add(s.Policy.WaitTimeout)
		if r.Health == health.Progressing && now.Before(deadline) {
			return &diff.Outcome{Verdict: diff.Waiting, Change: c, BlockedBy: dep, Until: deadline,
				Err: diff.Gated(ErrDependencyNotReady, "%s is %s: %s", dep, r.Health, r.Reason)}
		}
		after := ""
		if r.Health == health.Progressing && waited {
			after = " after " + s.Policy.WaitTimeout.String()
		}
		return blocked(diff.Gated(ErrDependencyNotReady, "%s is %s%s: %s", dep, r.Health, after, r.Reason))
	}
	return nil
}

// pruneUser names a resource leaving with c (in the inventory, not in the
// desired set) that depends on c's resource or lies inside its path: it
// is pruned first. Records written before dependencies were recorded
// have only their paths to go by.
func pruneUser(c *diff.Change, set *resource.Set, snap *state.Snapshot) string {
	for _, e := range snap.Inventory {
		if e.ID == string(c.ID) || e.NoPrune || set.Get(resource.ID(e.ID)) != nil {
			continue
		}
		if slices.Contains(e.DependsOn, string(c.ID)) || inside(e.Path, c.Path) {
			return e.ID
		}
	}
	return ""
}

// inside reports whether path p lies strictly below directory dir.
func inside(p, dir string) bool {
	if p == "" || dir == "" || p == dir {
		return false
	}
	return strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// prunes lists what a --prune sync of the plan would delete.
func prunes(plan *diff.Plan) []resource.ID {
	var ids []resource.ID
	for _, c := range plan.Changes {
		if c.Prune && c.Pending() {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// count is n things, in words: "1 resource", "3 resources".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// few names up to n IDs and counts the rest.
func few(ids []resource.ID, n int) string {
	var names []string
	for _, id := range ids[:min(n, len(ids))] {
		names = append(names, string(id))
	}
	out := strings.Join(names, ", ")
	if len(ids) > n {
		out += fmt.Sprintf(" and %d more", len(ids)-n)
	}
	return out
}
