package index

import (
	"bytes"
	"sort"
	"sync"
	"time"
)

// A search that cannot gallop from where the last one ended (the first
// of a load, as each event of an agent makes; one that goes back) would
// halve the whole base, reading a block of rows and one of strings at
// each step: 20 steps at 1,000,000 entries against 13 at 10,000, most of
// them misses of the block cache. A sparse index, the path of every
// sparseStep-th row (what git's index and an SSTable's block index keep),
// narrows it to the rows between two of them first: a search then costs
// the same at any size. It is read once per base file and process (the
// rows' blocks, the strings of one row in sparseStep), and kept beside
// what the process knows of that file: about 3 bytes an entry.

// sparseStep is the rows between two paths of a sparse index: 128 rows
// are 13.5 KiB, within one or two blocks. 0: none (a benchmark's
// baseline).
var sparseStep = 128

// minSparseRows is the fewest rows a base has for a sparse index to be
// read: below it, a search reads few blocks anyway.
const minSparseRows = 4096

// sparseIndex holds paths one after another in buf; path k is
// buf[off[k]:off[k+1]].
type sparseIndex struct {
	buf []byte
	off []uint32
}

func (s *sparseIndex) len() int { return len(s.off) - 1 }

func (s *sparseIndex) path(k int) []byte { return s.buf[s.off[k]:s.off[k+1]] }

// count is how many of its paths sort before p.
func (s *sparseIndex) count(p string) int {
	return sort.Search(s.len(), func(k int) bool { return string(s.path(k)) >= p })
}

// sparseIndex is b's sparse index: the one this process read of the same
// file before, or read now; nil for a small base, one in memory, a
// checkpoint or a run, and after a failed read.
func (b *base) sparseIndex() *sparseIndex {
	if b.sparse != nil || b.tried {
		return b.sparse
	}
	b.tried = true
	if sparseStep == 0 || b.f == nil || b.marked || b.n < minSparseRows {
		return nil
	}
	id, known := checkedID(b.f, false, time.Now())
	if known {
		if s := sparses.get(id); s != nil {
			b.sparse = s
			return s
		}
	}
	s := &sparseIndex{off: make([]uint32, 1, b.n/sparseStep+2)}
	for i := 0; i < b.n; i += sparseStep {
		p := b.pathView(i)
		if b.err != nil {
			return nil
		}
		s.buf = append(s.buf, p...)
		s.off = append(s.off, uint32(len(s.buf)))
	}
	// Paths sorted, as parseBase checked: a file changed under the base
	// since would show here first.
	for k := 1; k < s.len(); k++ {
		if bytes.Compare(s.path(k-1), s.path(k)) >= 0 {
			return nil
		}
	}
	s.buf = bytes.Clone(s.buf)
	b.sparse = s
	if known {
		sparses.put(id, s)
	}
	return s
}

// sparses are the sparse indexes read last, by file.
var sparses = sparseCache{m: map[baseIdentity]*sparseIndex{}}

// maxSparses bounds them: a state dir has one index a tree, and the
// agent searches the index of the tree an event is in.
const maxSparses = 8

type sparseCache struct {
	mu sync.Mutex
	m  map[baseIdentity]*sparseIndex
}

func (c *sparseCache) get(id baseIdentity) *sparseIndex {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}

func (c *sparseCache) put(id baseIdentity, s *sparseIndex) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxSparses {
		clear(c.m)
	}
	c.m[id] = s
}
