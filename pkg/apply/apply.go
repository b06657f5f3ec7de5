// Package apply carries out a whole plan through the engine: resources in
// dependency order with bounded concurrency, a failure blocking only its
// dependents, the snapshot saved after every group, and prune last, in
// reverse dependency order. What to do with each change, and whether it
// may be done now, is the engine's (Converger).
package apply

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Converger converges one planned change, gate included, and says how it
// ended; Save persists the snapshot between groups.
type Converger interface {
	ApplyPlanned(ctx context.Context, c *diff.Change) diff.Outcome
	Save() error
}

// Options shape a run.
type Options struct {
	Concurrency int
	Log         *slog.Logger
}

// waitPoll is how often a change waiting for a dependency to get ready is
// tried again.
const waitPoll = 10 * time.Millisecond

// Run applies the plan: each group of the dependency order at once, then
// what left Git. A change whose dependency failed or was blocked in this
// run is blocked by the engine's gate, which reads the run's attempt.
func Run(ctx context.Context, conv Converger, set *resource.Set, plan *diff.Plan, o Options) (*Report, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	byID := map[resource.ID]*diff.Change{}
	for _, c := range plan.Changes {
		byID[c.ID] = c
	}
	rep := &Report{}
	var mu sync.Mutex // guards rep
	add := func(o diff.Outcome) *Result {
		res := resultOf(o)
		mu.Lock()
		defer mu.Unlock()
		rep.Results = append(rep.Results, res)
		return res
	}
	for _, level := range set.Levels() {
		// Goroutines return nil: a failure is recorded per resource and
		// blocks only its dependents, never its siblings.
		var g errgroup.Group
		g.SetLimit(max(o.Concurrency, 1))
		for _, r := range level {
			c := byID[r.ID()]
			g.Go(func() error {
				if res := add(converge(ctx, conv, c)); res.Outcome != Unchanged {
					log := o.Log.With("resource", c.ID, "action", c.Action, "outcome", res.Outcome)
					if res.Err != nil {
						log = log.With("error", res.Err)
					}
					log.Info("applied")
				}
				return nil
			})
		}
		g.Wait()
		if err := conv.Save(); err != nil {
			return rep, err
		}
	}
	// What left Git, in reverse dependency order: no directory is deleted
	// under a process that could not be stopped.
	var gone []*diff.Change
	for _, c := range plan.Changes {
		if c.Desired == nil {
			gone = append(gone, c)
		}
	}
	for _, c := range pruneOrder(gone) {
		add(converge(ctx, conv, c))
	}
	if len(gone) > 0 {
		if err := conv.Save(); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// converge applies one change, waiting while the engine holds it for a
// dependency getting ready.
func converge(ctx context.Context, conv Converger, c *diff.Change) diff.Outcome {
	for {
		o := conv.ApplyPlanned(ctx, c)
		if o.Verdict != diff.Waiting || o.Until.IsZero() || ctx.Err() != nil {
			return o
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Until(o.Until), waitPoll)):
		}
	}
}

// Applier reports the live health of what was applied.
type Applier interface {
	// Ready reports the live health of a resource that turns healthy after
	// it is applied; ok is false for kinds that are done once applied.
	Ready(ctx context.Context, rec *state.Entry) (r health.Report, ok bool)
}

// WaitHealthy waits until every resource of ids (what a sync applied)
// that turns healthy after its apply is Healthy, up to timeout; it lists
// those that are not, with why. An unrelated Degraded resource is not
// waited for.
func WaitHealthy(ctx context.Context, a Applier, snap *state.Snapshot, ids []resource.ID, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		var bad []string
		for _, id := range ids {
			rec := snap.Find(string(id))
			if rec == nil {
				continue
			}
			if r, ok := a.Ready(ctx, rec); ok && r.Health != health.Healthy {
				bad = append(bad, fmt.Sprintf("%s is %s: %s", rec.ID, r.Health, r.Reason))
			}
		}
		if len(bad) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return bad
		}
		time.Sleep(20 * time.Millisecond)
	}
}
