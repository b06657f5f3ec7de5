//go:build linux

package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// List names every entry with the type and inode an lstat gives, through
// directories large enough to take several reads, and again from the
// start on a second call and on a duplicate listing at the same time.
func TestListTypesAndInodes(t *testing.T) {
	dir := t.TempDir()
	want := map[string]fs.FileMode{"d": fs.ModeDir, "l": fs.ModeSymlink, "p": fs.ModeNamedPipe}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "p"), 0o644); err != nil {
		t.Fatal(err)
	}
	// 3,000 files of long names: about 300 KiB of directory entries, many
	// times the listing's buffer.
	for i := range 3000 {
		name := fmt.Sprintf("%04d-%s", i, strings.Repeat("n", 80))
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want[name] = 0
	}
	d := openDir(t, dir)
	dup, err := d.Dup()
	if err != nil {
		t.Fatal(err)
	}
	defer dup.Close()
	check := func(d *Dir) {
		got, err := d.List()
		if err != nil {
			t.Error(err)
			return
		}
		if len(got) != len(want) {
			t.Errorf("listed %d entries, want %d", len(got), len(want))
		}
		for _, e := range got {
			typ, ok := want[e.Name]
			if !ok {
				t.Errorf("listed %q, which is not there", e.Name)
				continue
			}
			st, err := d.Lstat(e.Name)
			if err != nil {
				t.Error(err)
				continue
			}
			if !e.TypeKnown || e.Type != typ || e.Type != st.Mode.Type() || e.Ino != st.Ino {
				t.Errorf("%s: type %v (known %v) inode %d, lstat says %v and %d", e.Name, e.Type, e.TypeKnown, e.Ino, st.Mode.Type(), st.Ino)
			}
		}
	}
	check(d)
	done := make(chan struct{})
	go func() { defer close(done); check(dup) }()
	check(d) // again, from the start, while the duplicate lists too
	<-done
	entries, err := d.ReadDir()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Fatalf("ReadDir: %d entries, want %d", len(entries), len(want))
	}
	for _, e := range entries {
		if e.Type() != want[e.Name()] {
			t.Errorf("ReadDir: %s is %v, want %v", e.Name(), e.Type(), want[e.Name()])
		}
	}
}

// Entries in path order, each directory's contents right after it, are
// the paths sorted byte by byte, a directory's as if it ended in "/": the
// order of a Git tree.
func TestSortPathOrder(t *testing.T) {
	tree := map[string][]DirEntry{
		"":    {{Name: "a.txt"}, {Name: "a", Type: fs.ModeDir}, {Name: "a0"}, {Name: "a-b", Type: fs.ModeDir}, {Name: "A"}, {Name: "a!"}},
		"a":   {{Name: "z"}, {Name: "b", Type: fs.ModeDir}, {Name: "b.go"}, {Name: "b0"}},
		"a/b": {{Name: "x"}},
		"a-b": {{Name: "c"}},
	}
	var walked []string
	var walk func(rel string)
	walk = func(rel string) {
		entries := slices.Clone(tree[rel])
		SortPathOrder(entries)
		for _, e := range entries {
			p := e.Name
			if rel != "" {
				p = rel + "/" + e.Name
			}
			if e.Type.IsDir() {
				walked = append(walked, p+"/")
				walk(p)
			} else {
				walked = append(walked, p)
			}
		}
	}
	walk("")
	if !sort.StringsAreSorted(walked) {
		t.Errorf("walked in path order: %q, not sorted", walked)
	}
}

// Lstat, which a walk calls for every entry of a tree, allocates nothing,
// and says what is missing as fs.ErrNotExist; a name too long for its
// buffer is still described.
func TestLstatAllocatesNothing(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("l", 255)
	for _, name := range []string{"f", long} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("abc"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d := openDir(t, dir)
	for _, name := range []string{"f", long} {
		if st, err := d.Lstat(name); err != nil || st.Size != 3 || !st.Mode.IsRegular() {
			t.Errorf("Lstat(%.10s…) = %+v, %v", name, st, err)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { d.Lstat("f") }); allocs != 0 {
		t.Errorf("Lstat: %.0f allocations, want none", allocs)
	}
	if _, err := d.Lstat("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Lstat of a missing name: %v, want fs.ErrNotExist", err)
	}
}

// SortPathOrder sorts entries as Git orders a tree: by name, byte by
// byte, a directory's as if it ended in "/" ("a.txt" before "a", before
// "a0"). A walk that visits entries in this order, each directory's
// contents right after it, meets the files in the byte order of their
// paths, as a tree index stores them. Entries of unknown type sort as
// files.
func SortPathOrder(entries []DirEntry) {
	slices.SortFunc(entries, func(a, b DirEntry) int {
		return ComparePathOrder(a.Name, a.Type.IsDir(), b.Name, b.Type.IsDir())
	})
}
