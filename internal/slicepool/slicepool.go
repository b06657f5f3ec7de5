// Package slicepool keeps slices for reuse in classes of capacity, powers
// of two: a slice taken for n elements holds them without growing, and a
// large one given back is found again by the next large need, where one
// pool of any size handed each need whatever the last gave back.
package slicepool

import "sync"

// classes is how many capacities a Pool keeps: the smallest, and each
// double of it.
const classes = 10

// Pool keeps slices of T whose capacity is Smallest times a power of two,
// up to 512 times it. The zero Pool is not ready: set Smallest.
type Pool[T any] struct {
	Smallest int // the smallest class's capacity; a power of two
	pools    [classes]sync.Pool
}

// class is the class of the slices that hold n elements, or -1 when
// the largest does not.
func (p *Pool[T]) class(n int) int {
	room := p.Smallest
	for c := range classes {
		if n <= room {
			return c
		}
		room *= 2
	}
	return -1
}

// Get returns an empty slice with room for n elements at least.
func (p *Pool[T]) Get(n int) []T {
	c := p.class(n)
	if c < 0 {
		return make([]T, 0, n)
	}
	if s, ok := p.pools[c].Get().(*[]T); ok {
		return (*s)[:0]
	}
	return make([]T, 0, p.Smallest<<c)
}

// Grow returns s with room for one more element: s itself while it has
// it, else its elements moved to a slice of the next class, s given back.
func (p *Pool[T]) Grow(s []T) []T {
	if len(s) < cap(s) {
		return s
	}
	more := append(p.Get(max(2*len(s), 1)), s...)
	p.Put(s)
	return more
}

// Put gives s back, its elements up to len(s) cleared so that it holds
// nothing for the collector to keep; past len(s) they must be zero (as
// a slice of Get, appended to, leaves them). A slice of no class's
// capacity is left to the collector.
func (p *Pool[T]) Put(s []T) {
	c := p.class(cap(s))
	if c < 0 || cap(s) != p.Smallest<<c {
		return
	}
	clear(s)
	s = s[:0]
	p.pools[c].Put(&s)
}
