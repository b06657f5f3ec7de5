package reconcile

import (
	"context"
	"fmt"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// Which keys a continuous engine (the agent) looks at, and when: what a
// new revision changes, what a full scan finds pending, what waits on a
// key that converged.

// Changed lists the resources whose desired state differs between two
// revisions (old nil: the first), and those in the inventory that left
// Git; each once. For a resource whose kind can tell which parts of it
// changed (a mirror from Git), scopes holds those: converging it looks at
// them alone.
func (s *Session) Changed(old, d *Desired) (keys []resource.ID, scopes map[resource.ID][]string) {
	seen := map[resource.ID]bool{}
	add := func(id resource.ID) {
		if !seen[id] {
			seen[id] = true
			keys = append(keys, id)
		}
	}
	view := s.w.View()
	host := func(des *Desired) driver.Host {
		env := *s.Env
		env.Snapshot, env.Tree, env.Set = view, des.Checkout.Tree, des.Set
		return driver.Host{Env: &env}
	}
	digest := func(des *Desired, r *resource.Resource) string {
		sum, err := host(des).Digest(r)
		if err != nil {
			// Cannot tell: look at it again, as a change.
			return fmt.Sprintf("unknown %p", r)
		}
		return sum
	}
	scopes = map[resource.ID][]string{}
	for _, r := range d.Set.Resources() {
		if old == nil {
			add(r.ID())
			continue
		}
		prev := old.Set.Get(r.ID())
		if paths, ok := host(d).Changes(old.Checkout.Tree, prev, r, scopeLimit); ok {
			if len(paths) > 0 {
				add(r.ID())
				scopes[r.ID()] = paths
			}
			continue
		}
		if prev == nil || digest(old, prev) != digest(d, r) {
			add(r.ID())
		}
	}
	for _, rec := range view.Inventory {
		if id := resource.ID(rec.ID); old == nil || d.Set.Get(id) == nil {
			add(id)
		}
	}
	return keys, scopes
}

// scopeLimit bounds the entries a revision names for a converge in scope:
// past it, the resource is looked at whole.
const scopeLimit = 256

// Scan observes everything, the full drift check beneath the watches, and
// lists what is due; problems are the resources that could not be
// observed, with why.
func (s *Session) Scan(ctx context.Context) (due []resource.ID, problems []*diff.Change) {
	d := s.current()
	if d == nil {
		return nil, nil
	}
	for _, c := range s.Plan(ctx).Changes {
		switch {
		case c.Err != nil:
			problems = append(problems, c)
			due = append(due, c.ID)
		case c.Pending():
			due = append(due, c.ID)
		}
	}
	return due, problems
}

// Dependents lists the desired resources that come after id: they may be
// waiting for it.
func (s *Session) Dependents(id resource.ID) []resource.ID {
	d := s.current()
	if d == nil {
		return nil
	}
	var out []resource.ID
	for _, r := range d.Set.Resources() {
		for _, dep := range d.Set.Deps(r.ID()) {
			if dep == id {
				out = append(out, r.ID())
				break
			}
		}
	}
	return out
}
