package index

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// TestSparseSearch: a search through the sparse index finds the row a
// halving of the whole base finds, for paths present, absent, before the
// first and past the last, in any order.
func TestSparseSearch(t *testing.T) {
	const n = 20000
	p := filepath.Join(t.TempDir(), "x.idx")
	x := NewAt(fileAt(p))
	for i := range n {
		x.Set(fmt.Sprintf("d%03d/f%05d", i%97, i), &Entry{Stat: hostfs.Stat{Ino: uint64(i), Mode: 0o644}, SHA256: fmt.Sprintf("%064x", i)})
	}
	if err := x.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * racyMargin) // known by its identity from now on
	y, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	b := y.base
	want := func(q string) int {
		lo, hi := 0, b.n
		for lo < hi {
			m := (lo + hi) / 2
			if string(b.pathView(m)) < q {
				lo = m + 1
			} else {
				hi = m
			}
		}
		return lo
	}
	rng := rand.New(rand.NewPCG(5, 6))
	queries := []string{"", "a", "d000/f00000", "d000/f00000\x00", "d096/f19999", "d096/g", "e", "\xff"}
	for range 3000 {
		i := rng.IntN(n + 500)
		q := fmt.Sprintf("d%03d/f%05d", i%97, i)
		if rng.IntN(3) == 0 {
			q += "x" // absent, between two rows
		}
		queries = append(queries, q)
	}
	for _, q := range queries {
		b.at = 0 // no gallop: the sparse index's search
		if got, w := b.search(q), want(q); got != w {
			t.Fatalf("search %q: row %d, want %d", q, got, w)
		}
	}
	if b.sparse == nil || b.sparse.len() != (n+sparseStep-1)/sparseStep {
		t.Fatalf("sparse index: %+v", b.sparse)
	}
	// Another load of the same file takes it as read.
	z, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	if z.Get("d005/f00005") == nil || z.base.sparse != b.sparse {
		t.Errorf("another load read the sparse index again, or found nothing")
	}
}
