package resource

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
)

// Set is a validated desired state: resources, their claims on the host, and
// the dependency graph (explicit dependsOn, implied requirements, and a path
// inside a managed directory coming after that directory).
type Set struct {
	byID   map[ID]*Resource
	deps   map[ID][]ID
	levels [][]*Resource
	claims []claimOf // sorted by path
}

type claimOf struct {
	Claim
	res *Resource
}

// Resources lists every resource in dependency order.
func (s *Set) Resources() []*Resource {
	var out []*Resource
	for _, l := range s.levels {
		out = append(out, l...)
	}
	return out
}

// Len is the number of resources.
func (s *Set) Len() int { return len(s.byID) }

// Get finds a resource by ID.
func (s *Set) Get(id ID) *Resource { return s.byID[id] }

// Deps lists what id must come after.
func (s *Set) Deps(id ID) []ID { return s.deps[id] }

// Levels groups resources so that each depends only on earlier levels.
func (s *Set) Levels() [][]*Resource { return s.levels }

// ClaimedBy names the resource that claims exactly path p, if any.
func (s *Set) ClaimedBy(p string) *Resource {
	i := sort.Search(len(s.claims), func(i int) bool { return s.claims[i].Path >= p })
	if i < len(s.claims) && s.claims[i].Path == p {
		return s.claims[i].res
	}
	return nil
}

// ManagesWithin reports whether some resource other than except claims p or
// a path below it: purge must spare such entries.
func (s *Set) ManagesWithin(p string, except ID) bool {
	i := sort.Search(len(s.claims), func(i int) bool { return s.claims[i].Path >= p })
	for ; i < len(s.claims) && within(s.claims[i].Path, p); i++ {
		if s.claims[i].res.ID() != except {
			return true
		}
	}
	return false
}

func within(p, base string) bool {
	return p == base || base == "/" || strings.HasPrefix(p, base+"/")
}

func fieldErr(r *Resource, field, format string, args ...any) *FieldError {
	return &FieldError{Origin: r.Origin, Line: r.Line(field), ID: r.ID(), Field: field, Msg: fmt.Sprintf(format, args...)}
}

// newSet checks what no single document can: unique IDs and paths inside
// the allowed ones (when any), dependencies that exist and form no cycle.
func newSet(list []*Resource, allowed []string, reserved []Reserved) (*Set, error) {
	s := &Set{byID: map[ID]*Resource{}, deps: map[ID][]ID{}}
	var errs Problems
	var kept []*Resource
	for _, r := range list {
		if prev, dup := s.byID[r.ID()]; dup {
			errs = append(errs, fieldErr(r, "metadata.name", "%s is already declared in %s (document %d)", r.ID(), prev.Origin.File, prev.Origin.Doc))
			continue
		}
		s.byID[r.ID()] = r
		kept = append(kept, r)
		for i, c := range r.Spec.Claims() {
			c.Field = cmpOr(c.Field, fmt.Sprintf("claim %d", i))
			s.claims = append(s.claims, claimOf{c, r})
		}
	}
	sort.SliceStable(s.claims, func(i, j int) bool { return s.claims[i].Path < s.claims[j].Path })
	errs = append(errs, s.checkClaims()...)
	errs = append(errs, s.checkAllowed(allowed)...)
	errs = append(errs, s.checkReserved(reserved)...)
	errs = append(errs, checkWatched(kept, reserved)...)

	for _, r := range kept {
		id := r.ID()
		seen := map[ID]bool{}
		add := func(dep ID, field string) {
			if seen[dep] || dep == id {
				return
			}
			seen[dep] = true
			if s.byID[dep] == nil {
				errs = append(errs, fieldErr(r, field, "%s is not declared in any manifest", dep))
				return
			}
			s.deps[id] = append(s.deps[id], dep)
		}
		for i, dep := range r.Spec.Common().DependsOn {
			add(dep, fmt.Sprintf("spec.dependsOn[%d]", i))
		}
		if rq, ok := r.Spec.(Requirer); ok {
			for _, dep := range rq.Requires() {
				add(dep, "spec")
			}
		}
		for _, c := range r.Spec.Claims() {
			if owner := s.nearestAncestor(c.Path); owner != nil {
				add(owner.ID(), c.Field)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if err := s.sort(kept); err != nil {
		return nil, Problems{err}
	}
	return s, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkClaims finds two resources on one path, and paths inside a mirrored tree.
func (s *Set) checkClaims() Problems {
	var errs Problems
	for i, c := range s.claims {
		if i > 0 && s.claims[i-1].Path == c.Path {
			o := s.claims[i-1]
			errs = append(errs, fieldErr(c.res, c.Field, "%s is also managed by %s (%s, document %d)", c.Path, o.res.ID(), o.res.Origin.File, o.res.Origin.Doc))
		}
		if !c.Tree {
			continue
		}
		for _, o := range s.claims[i+1:] {
			if !strings.HasPrefix(o.Path, c.Path+"/") {
				break
			}
			if o.res.parent == c.res.ID() {
				continue // its own encrypted entry, which it leaves out of its mirror
			}
			errs = append(errs, fieldErr(o.res, o.Field, "%s lies inside %s, which %s mirrors from its source; manage it in the source instead", o.Path, c.Path, c.res.ID()))
		}
	}
	return errs
}

// checkAllowed finds claimed paths outside every allowed path. The writer
// checks again on the path a write resolves to (a symlink on the host can
// redirect it); this check names the resource before anything is applied.
func (s *Set) checkAllowed(allowed []string) Problems {
	if len(allowed) == 0 {
		return nil
	}
	var errs Problems
	for _, c := range s.claims {
		if !slices.ContainsFunc(allowed, func(a string) bool { return a == "/" || within(c.Path, a) }) {
			errs = append(errs, fieldErr(c.res, c.Field, "%s is outside the allowed paths (%s); add --allowed-path or move it", c.Path, strings.Join(allowed, ", ")))
		}
	}
	return errs
}

// checkReserved finds claims on what cortex-sync owns: a path at or below
// a reserved one, or above one when the claim could replace or purge what
// lies below it. Like checkAllowed it names the resource before anything
// is applied; hostfs refuses the same writes again on the paths they
// resolve to.
func (s *Set) checkReserved(reserved []Reserved) Problems {
	var errs Problems
	for _, c := range s.claims {
		if r, ok := ReservedBy(reserved, c.Path); ok {
			errs = append(errs, fieldErr(c.res, c.Field, "%s lies in %s, %s; cortex-sync keeps its own state or trust there and no manifest may write it: %s", c.Path, r.Path, r.What, whatToDo(r)))
			continue
		}
		if c.Keeps {
			continue
		}
		for _, r := range reserved {
			if within(r.Path, c.Path) {
				errs = append(errs, fieldErr(c.res, c.Field, "%s holds %s, %s, which this %s would %s; manage the paths inside it instead, or %s", c.Path, r.Path, r.What, c.res.Kind, replaceOrPurge(c.Claim), whatToDo(r)))
				break
			}
		}
	}
	return errs
}

// checkWatched finds paths a resource watches (a Command's creates) in a
// reserved path: cortex-sync writes there itself, so each of its saves
// would set the resource off again.
func checkWatched(list []*Resource, reserved []Reserved) Problems {
	var errs Problems
	for _, r := range list {
		w, ok := r.Spec.(Watched)
		if !ok {
			continue
		}
		for _, p := range w.Watched() {
			if res, ok := ReservedBy(reserved, p); ok {
				errs = append(errs, fieldErr(r, "spec", "watches %s, which lies in %s, %s: cortex-sync writes there itself, so every save of its own would set this resource off; watch another path", p, res.Path, res.What))
			}
		}
	}
	return errs
}

// ReservedBy finds the reserved path that p is, or lies below.
func ReservedBy(reserved []Reserved, p string) (Reserved, bool) {
	for _, r := range reserved {
		if within(p, r.Path) {
			return r, true
		}
	}
	return Reserved{}, false
}

// Reaches finds the reserved path that p is, lies below, or lies above:
// what removing p whole would touch.
func Reaches(reserved []Reserved, p string) (Reserved, bool) {
	for _, r := range reserved {
		if within(p, r.Path) || within(r.Path, p) {
			return r, true
		}
	}
	return Reserved{}, false
}

// whatToDo says how to get out of a reserved path's way.
func whatToDo(r Reserved) string {
	if strings.HasPrefix(r.What, "the state dir") {
		return "move the resource, or give cortex-sync another --state-dir"
	}
	return "move the resource, or keep that file elsewhere"
}

func replaceOrPurge(c Claim) string {
	if c.Tree {
		return "mirror over (deleting what its source lacks)"
	}
	return "purge or replace"
}

// nearestAncestor is the resource claiming the closest directory above p.
func (s *Set) nearestAncestor(p string) *Resource {
	for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
		if r := s.ClaimedBy(d); r != nil {
			return r
		}
	}
	return nil
}

// sort layers the graph (Kahn's algorithm) and names a cycle when there is one.
func (s *Set) sort(list []*Resource) error {
	indeg := map[ID]int{}
	users := map[ID][]ID{}
	for _, r := range list {
		indeg[r.ID()] += 0
		for _, d := range s.deps[r.ID()] {
			indeg[r.ID()]++
			users[d] = append(users[d], r.ID())
		}
	}
	var level []*Resource
	for _, r := range list {
		if indeg[r.ID()] == 0 {
			level = append(level, r)
		}
	}
	done := 0
	for len(level) > 0 {
		sort.Slice(level, func(i, j int) bool { return level[i].ID() < level[j].ID() })
		s.levels = append(s.levels, level)
		done += len(level)
		var next []*Resource
		for _, r := range level {
			for _, u := range users[r.ID()] {
				if indeg[u]--; indeg[u] == 0 {
					next = append(next, s.byID[u])
				}
			}
		}
		level = next
	}
	if done == len(list) {
		return nil
	}
	cycle := s.findCycle(indeg)
	r := s.byID[cycle[0]]
	names := make([]string, len(cycle))
	for i, id := range cycle {
		names[i] = string(id)
	}
	return fieldErr(r, "spec.dependsOn", "dependency cycle: %s", strings.Join(names, " -> "))
}

// findCycle walks dependencies among the unsorted resources until one repeats.
func (s *Set) findCycle(indeg map[ID]int) []ID {
	var start ID
	for id, n := range indeg {
		if n > 0 && (start == "" || id < start) {
			start = id
		}
	}
	pos := map[ID]int{}
	var trail []ID
	for id := start; ; {
		if i, ok := pos[id]; ok {
			return append(trail[i:], id)
		}
		pos[id] = len(trail)
		trail = append(trail, id)
		var next ID
		for _, d := range s.deps[id] {
			if indeg[d] > 0 && (next == "" || d < next) {
				next = d
			}
		}
		id = next
	}
}
