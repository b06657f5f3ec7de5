package resource

import "sort"

// Recalled is a set of resources rebuilt from a snapshot: the desired state
// as last applied, for judging the host without a source. It was validated
// when it was applied, so it is not validated again, and it has no
// dependency order (nothing is applied from it).
func Recalled(list []*Resource) *Set {
	s := &Set{byID: map[ID]*Resource{}, deps: map[ID][]ID{}, levels: [][]*Resource{list}}
	for _, r := range list {
		s.byID[r.ID()] = r
		for _, c := range r.Spec.Claims() {
			s.claims = append(s.claims, claimOf{c, r})
		}
	}
	sort.SliceStable(s.claims, func(i, j int) bool { return s.claims[i].Path < s.claims[j].Path })
	return s
}
