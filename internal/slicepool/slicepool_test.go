package slicepool

import (
	"slices"
	"testing"
)

// TestGetRoom: a slice taken for n elements holds them without growing,
// in each class and past the largest.
func TestGetRoom(t *testing.T) {
	p := &Pool[int]{Smallest: 8}
	for _, n := range []int{0, 1, 8, 9, 100, 4096, 4097, 10000} {
		s := p.Get(n)
		if len(s) != 0 || cap(s) < n {
			t.Errorf("Get(%d): len %d cap %d", n, len(s), cap(s))
		}
		p.Put(s)
	}
}

// TestGrowKeeps: elements appended through Grow, across classes, stay in
// order, and the slices left behind are cleared as they go back.
func TestGrowKeeps(t *testing.T) {
	p := &Pool[*int]{Smallest: 2}
	var s []*int
	var want []int
	var left [][]*int // every backing array given back, whole
	for i := range 100 {
		before := s[:cap(s)]
		s = p.Grow(s)
		if cap(s) != cap(before) && cap(before) > 0 {
			left = append(left, before)
		}
		v := i
		s = append(s, &v)
		want = append(want, i)
	}
	var got []int
	for _, v := range s {
		got = append(got, *v)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("grown to %v, want %v", got, want)
	}
	for _, l := range left {
		for i, v := range l {
			if v != nil {
				t.Fatalf("a slice of cap %d given back still holds element %d", cap(l), i)
			}
		}
	}
	full := s[:cap(s)]
	p.Put(s)
	for i, v := range full {
		if v != nil {
			t.Fatalf("Put left element %d", i)
		}
	}
}
