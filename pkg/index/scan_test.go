package index

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
// never set; entries of the base compare their content IDs as the IDs
// spelled out do, without spelling them.
func TestIndexScan(t *testing.T) {
	x := New()
	entry := func(i int) *Entry {
		return &Entry{Stat: hostfs.Stat{Ino: uint64(i), Size: int64(i), Mode: 0o644},
			SHA256: fmt.Sprintf("%064x", i), ContentID: fmt.Sprintf("git:%040x", i/2)}
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
	x.Set("d3", &Entry{Stat: hostfs.Stat{Mode: fs.ModeDir | 0o755}})
	x.Set("l", &Entry{Stat: hostfs.Stat{Mode: fs.ModeSymlink | 0o777}, Target: "../t"})
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
	found, raw := 0, 0
	var prev Found
	for _, p := range paths {
		var f Found
		ok := s.Find(p, &f)
		want := y.Get(p)
		if ok != (want != nil) || ok && (*f.Entry() != *want || f.ContentID() != want.ContentID || f.HasSHA256() != (want.SHA256 != "")) {
			t.Fatalf("Find(%s) = %v, %+v; Get: %+v", p, ok, f.Entry(), want)
		}
		if !ok {
			continue
		}
		found++
		// Compared without their IDs spelled out, as they are spelled.
		same, known := f.SameContent(&prev)
		spelled := f.ContentID() == prev.ContentID()
		if known && same != spelled {
			t.Errorf("SameContent(%s, the entry before) = %v; their IDs: %q, %q", p, same, f.ContentID(), prev.ContentID())
		}
		if known && spelled {
			raw++
		}
		prev = f
	}
	if raw < 100 {
		t.Errorf("%d entries compared the same as the one before without their IDs spelled out, want most of 150", raw)
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
	y, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	return y
}
