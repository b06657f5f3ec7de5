package state

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// TestIndexScan: a scan in path order finds what Get finds, for entries
// of the base, of the log and set since, and nothing for paths deleted or
// never set; the strings it cuts from the arena stay right as the arena
// grows.
func TestIndexScan(t *testing.T) {
	x := NewIndex()
	entry := func(i int) *IndexEntry {
		return &IndexEntry{Stat: hostfs.Stat{Ino: uint64(i), Size: int64(i), Mode: 0o644},
			SHA256: fmt.Sprintf("%064x", i), ContentID: fmt.Sprintf("git:%040x", i)}
	}
	var paths []string
	for i := range 300 {
		p := fmt.Sprintf("d%d/f%d", i/7, i)
		if i%11 == 0 {
			p = fmt.Sprintf("d%d-x/f%d", i/7, i) // sorts between d3 and d3/...
		}
		paths = append(paths, p)
		x.Set(p, entry(i))
	}
	x.Set("d3", &IndexEntry{Stat: hostfs.Stat{Mode: fs.ModeDir | 0o755}})
	x.Set("l", &IndexEntry{Stat: hostfs.Stat{Mode: fs.ModeSymlink | 0o777}, Target: "../t"})
	paths = append(paths, "l")
	p := filepath.Join(t.TempDir(), "x.idx")
	y := reloaded(t, x, p)
	// A log, and entries set since: the scan merges all three.
	y.Delete(paths[5])
	y.Set(paths[6], entry(1000))
	y = reloaded(t, y, p)
	y.Delete(paths[8])
	y.Set(paths[9], entry(2000))
	y.Set("d0/new", entry(3000))
	paths = append(paths, "d0/new", "d0/missing", "zz")
	slices.Sort(paths)
	s := y.Scan()
	var arena []byte
	found := 0
	for _, p := range paths {
		var e IndexEntry
		ok := s.Find(p, &e, &arena)
		want := y.Get(p)
		if ok != (want != nil) || ok && e != *want {
			t.Fatalf("Find(%s) = %v, %+v; Get: %+v", p, ok, e, want)
		}
		if ok {
			found++
		}
	}
	if found != y.Len()-1 { // all but the directory's entry
		t.Errorf("found %d entries, the index holds %d", found, y.Len())
	}
}

// reloaded saves x as the file p and loads it again.
func reloaded(t *testing.T, x *Index, p string) *Index {
	t.Helper()
	if err := x.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	y, err := LoadIndex(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	return y
}
