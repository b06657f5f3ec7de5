package apply

import (
	"sort"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// pruneOrder orders what left Git in reverse dependency order: a resource
// comes after everything that depended on it (a directory after the
// process serving it, a parent after what lies inside it). Among resources
// free to go, deeper paths come first.
func pruneOrder(gone []*diff.Change) []*diff.Change {
	in := map[resource.ID]bool{}
	for _, c := range gone {
		in[c.ID] = true
	}
	left := map[resource.ID]int{} // dependents not yet placed
	deps := map[resource.ID][]resource.ID{}
	for _, c := range gone {
		seen := map[resource.ID]bool{}
		add := func(d resource.ID) {
			if d == c.ID || !in[d] || seen[d] {
				return
			}
			seen[d] = true
			deps[c.ID] = append(deps[c.ID], d)
			left[d]++
		}
		if c.Record != nil {
			for _, d := range c.Record.DependsOn {
				add(resource.ID(d))
			}
		}
		// A path inside another's comes first, recorded or not (entries
		// written before dependencies were recorded have none).
		for _, o := range gone {
			if inside(c.Path, o.Path) {
				add(o.ID)
			}
		}
	}
	byDepth := func(l []*diff.Change) {
		sort.SliceStable(l, func(i, j int) bool {
			return strings.Count(l[i].Path, "/") > strings.Count(l[j].Path, "/")
		})
	}
	byID := map[resource.ID]*diff.Change{}
	var ready []*diff.Change
	for _, c := range gone {
		byID[c.ID] = c
		if left[c.ID] == 0 {
			ready = append(ready, c)
		}
	}
	placed := map[resource.ID]bool{}
	var order []*diff.Change
	for len(order) < len(gone) {
		if len(ready) == 0 {
			// A cycle, possible only between records of different
			// revisions: the rest go deepest first.
			for _, c := range gone {
				if !placed[c.ID] {
					ready = append(ready, c)
				}
			}
		}
		byDepth(ready)
		var next []*diff.Change
		for _, c := range ready {
			if placed[c.ID] {
				continue
			}
			placed[c.ID] = true
			order = append(order, c)
			for _, d := range deps[c.ID] {
				if left[d]--; left[d] == 0 && !placed[d] {
					next = append(next, byID[d])
				}
			}
		}
		ready = next
	}
	return order
}

// inside reports whether path p lies strictly below directory dir.
func inside(p, dir string) bool {
	if p == "" || dir == "" || p == dir {
		return false
	}
	return strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
