// Package apply carries out a plan: resources in dependency order with
// bounded concurrency, a failure blocking only its dependents, the snapshot
// saved after every group, and prune last, in reverse dependency order.
package apply

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Applier carries out one change and returns the resource's new record
// (nil when it is gone from the host). A failed apply may still return a
// record of what it learned (a command's exit code and output).
type Applier interface {
	Apply(ctx context.Context, c *diff.Change) (*state.Entry, error)
	// Ready reports the live health of a resource that turns healthy after
	// it is applied; ok is false for kinds that are done once applied.
	Ready(ctx context.Context, rec *state.Entry) (r health.Report, ok bool)
}

// Options shape a run.
type Options struct {
	Prune             bool // delete what left Git
	AllowEmpty        bool // prune even when the desired set is empty
	AllowSourceChange bool // prune even when the source differs from the snapshot's
	Concurrency       int
	// WaitTimeout bounds how long a dependent waits for a dependency to
	// turn healthy (a process passing its readiness probe).
	WaitTimeout time.Duration
	// Save persists the snapshot; it is called after every group.
	Save func(*state.Snapshot) error
	Log  *slog.Logger
}

// Refusals that stop a run before it touches anything.
var (
	ErrEmptyPrune   = errors.New("refusing to prune: the desired set is empty")
	ErrSourceChange = errors.New("refusing to prune: the source differs from the one the snapshot records")
)

// Check refuses a prune that would most likely be a mistake: one that
// would delete everything, or delete resources because the source changed.
// A new source that deletes nothing (the same repository at a new URL) is
// not refused.
func Check(plan *diff.Plan, set *resource.Set, snap *state.Snapshot, ref state.Source, o Options) error {
	if !o.Prune {
		return nil
	}
	if set.Len() == 0 && len(snap.Inventory) > 0 && !o.AllowEmpty {
		return fmt.Errorf("%w, so all %d resources in the inventory would be deleted; check the source path, or pass --allow-empty if that is what you want", ErrEmptyPrune, len(snap.Inventory))
	}
	// A snapshot that records no source (written by hand, or by a build
	// that did not record it) is no proof of the same source: what its
	// inventory would prune is refused the same way.
	if snap.Source != ref && !o.AllowSourceChange {
		if gone := prunes(plan); len(gone) > 0 {
			was := fmt.Sprintf("%s path %q", snap.Source.URL, snap.Source.Path)
			if snap.Source.URL == "" {
				was = "it records none"
			}
			return fmt.Errorf("%w (%s, now %s path %q); pass --allow-source-change if the host should follow the new source: prune would delete %s it does not declare (%s)",
				ErrSourceChange, was, ref.URL, ref.Path, count(len(gone), "resource"), few(gone, 3))
		}
	}
	return nil
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

// Run applies the plan and records every outcome in snap.
func Run(ctx context.Context, a Applier, set *resource.Set, plan *diff.Plan, snap *state.Snapshot, o Options) (*Report, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	byID := map[resource.ID]*diff.Change{}
	for _, c := range plan.Changes {
		byID[c.ID] = c
	}
	rep := &Report{}
	// touched: what this run changes. A dependency it changed is waited
	// for; one it left alone is judged as it is, at once.
	touched := map[resource.ID]bool{}
	for _, c := range plan.Changes {
		if c.Pending() {
			touched[c.ID] = true
		}
	}
	var mu sync.Mutex // guards snap, rep and failed
	failed := map[resource.ID]bool{}
	record := func(c *diff.Change, entry *state.Entry, err error) *Result {
		res := Record(snap, set, c, entry, err)
		if err != nil {
			failed[c.ID] = true
		}
		rep.Results = append(rep.Results, res)
		return res
	}

	for _, level := range set.Levels() {
		// What this group creates is named in the snapshot before the host
		// is touched: a kill between the creation and the next save must not
		// make cortex-sync forget it created the thing.
		var creating []state.Creation
		for _, r := range level {
			if c := byID[r.ID()]; c.Record == nil && !c.Observed.Exists && c.Pending() {
				creating = append(creating, state.Creation{ID: string(c.ID), Path: c.Path})
			}
		}
		if snap.Intend(creating) {
			if err := o.Save(snap); err != nil {
				return rep, err
			}
		}
		// Goroutines return nil: a failure is recorded per resource and
		// blocks only its dependents, never its siblings.
		var g errgroup.Group
		g.SetLimit(max(o.Concurrency, 1))
		for _, r := range level {
			c := byID[r.ID()]
			mu.Lock()
			blocker := blockedBy(set, r.ID(), failed)
			switch {
			case blocker != "":
				failed[r.ID()] = true
				rep.Results = append(rep.Results, &Result{ID: c.ID, Kind: c.Kind, Path: c.Path, Action: c.Action, Reason: c.Reason, Outcome: Blocked, BlockedBy: blocker})
				mu.Unlock()
				continue
			case c.Err != nil:
				record(c, nil, c.Err)
				mu.Unlock()
				continue
			case c.Suspended:
				rep.Results = append(rep.Results, &Result{ID: c.ID, Kind: c.Kind, Path: c.Path, Action: c.Action, Reason: c.Reason, Outcome: Suspended})
				mu.Unlock()
				continue
			}
			mu.Unlock()
			g.Go(func() error {
				if dep, why := waitDeps(ctx, a, set, r.ID(), snap, &mu, o.WaitTimeout, touched); dep != "" {
					mu.Lock()
					failed[r.ID()] = true
					rep.Results = append(rep.Results, &Result{ID: c.ID, Kind: c.Kind, Path: c.Path, Action: c.Action, Reason: c.Reason, Outcome: Blocked, BlockedBy: dep, Error: why})
					mu.Unlock()
					return nil
				}
				entry, err := a.Apply(ctx, c)
				if err != nil {
					err = fmt.Errorf("%s %s: %w", c.Action, c.ID, err)
				}
				mu.Lock()
				res := record(c, entry, err)
				mu.Unlock()
				o.Log.Info("applied", "resource", c.ID, "action", c.Action, "outcome", res.Outcome, "error", res.Error)
				return nil
			})
		}
		g.Wait()
		snap.Settle(func(id string) bool { return set.Get(resource.ID(id)) != nil })
		if err := o.Save(snap); err != nil {
			return rep, err
		}
	}

	// What left Git, in reverse dependency order. A resource whose
	// dependent could not go stays too: no directory is deleted under a
	// process that could not be stopped.
	var gone []*diff.Change
	for _, c := range plan.Changes {
		if c.Desired == nil {
			gone = append(gone, c)
		}
	}
	order, users := pruneOrder(gone)
	for _, c := range order {
		blocker := pruneBlocker(users[c.ID], failed)
		switch {
		case c.Err != nil:
			record(c, nil, c.Err)
		case c.Action == diff.Forget:
			snap.Drop(string(c.ID))
			rep.Results = append(rep.Results, &Result{ID: c.ID, Kind: c.Kind, Path: c.Path, Action: c.Action, Reason: c.Reason, Outcome: Forgotten})
		case !o.Prune:
			rep.Results = append(rep.Results, &Result{ID: c.ID, Kind: c.Kind, Path: c.Path, Action: c.Action, Reason: c.Reason, Outcome: Skipped})
		case blocker != "":
			failed[c.ID] = true // its entry stays, and so does what it depends on
			rep.Results = append(rep.Results, &Result{ID: c.ID, Kind: c.Kind, Path: c.Path, Action: c.Action, Reason: c.Reason, Outcome: Blocked, BlockedBy: blocker,
				Error: fmt.Sprintf("kept, because %s depends on it and was not deleted", blocker)})
		default:
			entry, err := a.Apply(ctx, c)
			if err != nil {
				err = fmt.Errorf("prune %s: %w", c.ID, err)
			}
			record(c, entry, err) // a failed prune keeps its entry: nothing is orphaned
		}
	}
	if len(gone) > 0 {
		if err := o.Save(snap); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// Record keeps the outcome of one change in the snapshot: the new record,
// its dependencies as applied, and the result; a failure keeps the old
// record (nothing is orphaned) with the error. It returns the outcome.
func Record(snap *state.Snapshot, set *resource.Set, c *diff.Change, entry *state.Entry, err error) *Result {
	res := &Result{ID: c.ID, Kind: c.Kind, Path: c.Path, Action: c.Action, Reason: c.Reason, Files: c.FileCount(), Backups: c.Backups()}
	now := time.Now().UTC()
	switch {
	case entry == nil:
	case c.Desired != nil:
		recordDeps(entry, set.Deps(c.ID))
	case c.Record != nil && entry != c.Record:
		recordDeps(entry, recordedDeps(c.Record)) // a failed prune keeps what it knew
	}
	if entry != nil && c.Desired != nil && c.Record == nil && snap.Intended(string(c.ID), c.Path) {
		entry.Created = true // made by this sync, or by one killed before recording it
	}
	switch {
	case err != nil:
		res.Outcome, res.Error = Failed, err.Error()
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
		res.Outcome = Applied
		if c.Action == diff.NoOp {
			res.Outcome = Unchanged
		}
		snap.Drop(string(c.ID))
	default:
		res.Outcome = Applied
		if c.Action == diff.NoOp {
			res.Outcome = Unchanged
			if c.Record != nil && c.Record.Result != nil && c.Record.Result.Error == "" {
				entry.Result = c.Record.Result
			}
		}
		if entry.Result == nil {
			entry.Result = &state.Result{Action: string(c.Action), Time: now}
		}
		snap.Put(entry)
	}
	return res
}

// waitDeps waits for the dependencies of id that turn healthy after their
// apply, up to timeout: those this run touched (started, restarted). One
// it left alone is judged at once: a dependency that never gets ready
// must not cost every sync the full timeout. It names one that is not
// healthy, and why.
func waitDeps(ctx context.Context, a Applier, set *resource.Set, id resource.ID, snap *state.Snapshot, mu *sync.Mutex, timeout time.Duration, touched map[resource.ID]bool) (resource.ID, string) {
	for _, dep := range set.Deps(id) {
		mu.Lock()
		rec := snap.Find(string(dep))
		mu.Unlock()
		if rec == nil {
			continue
		}
		if !touched[dep] {
			if r, ok := a.Ready(ctx, rec); ok && r.Health != health.Healthy {
				return dep, fmt.Sprintf("%s is %s: %s", dep, r.Health, r.Reason)
			}
			continue
		}
		if r, ok := waitHealthy(ctx, a, rec, timeout); ok && r.Health != health.Healthy {
			return dep, fmt.Sprintf("%s is %s after %s: %s", dep, r.Health, timeout, r.Reason)
		}
	}
	return "", ""
}

// waitHealthy polls a resource's health while it is Progressing.
func waitHealthy(ctx context.Context, a Applier, rec *state.Entry, timeout time.Duration) (health.Report, bool) {
	deadline := time.Now().Add(timeout)
	for {
		r, ok := a.Ready(ctx, rec)
		if !ok || r.Health != health.Progressing || time.Now().After(deadline) || ctx.Err() != nil {
			return r, ok
		}
		time.Sleep(10 * time.Millisecond)
	}
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

// pruneBlocker names one of users (those depending on a resource) that
// failed or was blocked, if any.
func pruneBlocker(users []resource.ID, failed map[resource.ID]bool) resource.ID {
	for _, u := range users {
		if failed[u] {
			return u
		}
	}
	return ""
}

// blockedBy names a dependency of id that failed or was blocked, if any.
func blockedBy(set *resource.Set, id resource.ID, failed map[resource.ID]bool) resource.ID {
	for _, d := range set.Deps(id) {
		if failed[d] {
			return d
		}
	}
	return ""
}
