package diff

import (
	"context"

	"golang.org/x/sync/errgroup"

	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Observer compares one resource's desired state (nil when it left Git) and
// its last applied record (nil when never applied) with the live host, and
// reports what it saw; Make decides what to do about it.
type Observer interface {
	Observe(ctx context.Context, desired *resource.Resource, rec *state.Entry) (*Change, error)
	// Verbs say how the kind carries out a create and an update.
	Verbs(kind string) Verbs
}

// Make builds the plan: every desired resource in dependency order, then
// every inventory entry that left Git. Resources are observed concurrently,
// at most concurrency at a time.
func Make(ctx context.Context, o Observer, set *resource.Set, snap *state.Snapshot, concurrency int) *Plan {
	p := &Plan{Source: snap.Source, Revision: snap.Revision}
	var jobs []func() *Change
	for _, r := range set.Resources() {
		rec := snap.Find(string(r.ID()))
		jobs = append(jobs, func() *Change { return One(ctx, o, r, rec) })
	}
	for _, rec := range snap.Inventory {
		if set.Get(resource.ID(rec.ID)) != nil {
			continue
		}
		jobs = append(jobs, func() *Change { return One(ctx, o, nil, rec) })
	}
	p.Changes = make([]*Change, len(jobs))
	var g errgroup.Group
	g.SetLimit(max(concurrency, 1))
	for i, job := range jobs {
		g.Go(func() error {
			p.Changes[i] = job() // an observation error is carried by its change
			return nil
		})
	}
	g.Wait()
	return p
}

// One observes one resource, desired (nil when it left Git) and recorded
// (nil when never applied), and decides what to do about it.
func One(ctx context.Context, o Observer, desired *resource.Resource, rec *state.Entry) *Change {
	if desired != nil {
		c := observe(ctx, o, desired, rec, desired.ID(), desired.Kind)
		c.Suspended = c.Suspended || desired.Suspended() // or held by an operator
		return c
	}
	if rec.NoPrune {
		return &Change{ID: resource.ID(rec.ID), Kind: rec.Kind, Path: rec.Path, Action: Forget, Reason: RemovedFromGit, Record: rec}
	}
	c := observe(ctx, o, nil, rec, resource.ID(rec.ID), rec.Kind)
	c.Reason = RemovedFromGit
	switch {
	case c.Err != nil:
	case c.Action == NoOp:
		c.Action = Forget // already gone from the host: only the record goes
	case c.Observed.Declared:
		// Declared gone in Git (an entry gone from the source of the
		// Directory that declared it): deleted as a mirror deletes, with
		// no --prune.
		return c
	case !rec.Created && len(c.Files) == 0:
		// Prune deletes only what cortex-sync created: what was there
		// before it took it over stays, as it is now.
		c.Action, c.Detail = Forget, "it was on the host before cortex-sync took it over; left in place"
	}
	c.Prune = c.Action == Delete
	return c
}

// observe asks the driver and decides, turning an error into a change that
// carries it.
func observe(ctx context.Context, o Observer, desired *resource.Resource, rec *state.Entry, id resource.ID, kind string) *Change {
	c, err := o.Observe(ctx, desired, rec)
	if err != nil {
		c = &Change{ID: id, Kind: kind, Action: NoOp, Health: health.Unknown, Err: err}
		if rec != nil {
			c.Path = rec.Path
		}
	} else {
		c.decide(o.Verbs(kind))
	}
	c.ID, c.Kind, c.Desired, c.Record = id, kind, desired, rec
	return c
}
