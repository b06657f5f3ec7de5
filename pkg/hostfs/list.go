package hostfs

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"sync"
)

// DirEntry is a name in a directory and what the listing itself says of
// it: its type and inode, from the directory entry (getdents64's d_type and
// d_ino on Linux), with no stat. Where the filesystem does not say the
// type, TypeKnown is false and only an Lstat tells.
type DirEntry struct {
	Name      string
	Type      fs.FileMode // fs.ModeDir, fs.ModeSymlink, 0 for a regular file, ...
	TypeKnown bool
	Ino       uint64
}

// List lists the directory's entries ("." and ".." left out), in no
// particular order. The names of one listing share a single allocation:
// listing a directory costs two allocations, however many entries it has.
// A Dir lists once at a time.
func (d *Dir) List() ([]DirEntry, error) {
	d.listMu.Lock()
	defer d.listMu.Unlock()
	l := listings.Get().(*listing)
	defer listings.Put(l)
	l.reset()
	if err := d.list(l); err != nil {
		return nil, d.pathErr("readdir", ".", err)
	}
	return l.entries(), nil
}

// listing gathers one directory's entries: their names one after another
// in names, the rest in ents; the getdents buffer beside them.
type listing struct {
	buf   []byte
	names []byte
	ents  []listed
}

type listed struct {
	end       int // where the name ends in names
	typ       fs.FileMode
	typeKnown bool
	ino       uint64
}

// listings are reused: a walk of many directories allocates its buffers
// once.
var listings = sync.Pool{New: func() any { return &listing{buf: make([]byte, 32<<10)} }}

func (l *listing) reset() { l.names, l.ents = l.names[:0], l.ents[:0] }

func (l *listing) add(name []byte, typ fs.FileMode, known bool, ino uint64) {
	if len(name) == 1 && name[0] == '.' || len(name) == 2 && name[0] == '.' && name[1] == '.' {
		return
	}
	l.names = append(l.names, name...)
	l.ents = append(l.ents, listed{end: len(l.names), typ: typ, typeKnown: known, ino: ino})
}

// entries is the listing as DirEntry values whose names are substrings
// of one string.
func (l *listing) entries() []DirEntry {
	all := string(l.names)
	out := make([]DirEntry, len(l.ents))
	start := 0
	for i, e := range l.ents {
		out[i] = DirEntry{Name: all[start:e.end], Type: e.typ, TypeKnown: e.typeKnown, Ino: e.ino}
		start = e.end
	}
	return out
}

// ComparePathOrder compares two names of one directory in path order: a
// directory's name as if it ended in "/".
func ComparePathOrder(a string, aDir bool, b string, bDir bool) int {
	n := min(len(a), len(b))
	if c := strings.Compare(a[:n], b[:n]); c != 0 {
		return c
	}
	ca, cb := 0, 0 // the byte after the common part: 0 when none
	switch {
	case len(a) > n:
		ca = int(a[n])
	case aDir:
		ca = '/'
	}
	switch {
	case len(b) > n:
		cb = int(b[n])
	case bDir:
		cb = '/'
	}
	return ca - cb
}

// ReadDir lists the directory's entries as fs.DirEntry values, in no
// particular order; Info stats an entry through the directory.
func (d *Dir) ReadDir() ([]fs.DirEntry, error) {
	entries, err := d.List()
	if err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, len(entries))
	lazy := make([]lazyEntry, len(entries))
	for i := range entries {
		if !entries[i].TypeKnown {
			st, err := d.Lstat(entries[i].Name)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return nil, err
			}
			entries[i].Type, entries[i].TypeKnown = st.Mode.Type(), true
		}
		lazy[i] = lazyEntry{d: d, e: entries[i]}
		out[i] = &lazy[i]
	}
	return slices.DeleteFunc(out, func(e fs.DirEntry) bool { return e == nil }), nil
}

// lazyEntry is a listed entry as an fs.DirEntry.
type lazyEntry struct {
	d *Dir
	e DirEntry
}

func (l *lazyEntry) Name() string      { return l.e.Name }
func (l *lazyEntry) IsDir() bool       { return l.e.Type.IsDir() }
func (l *lazyEntry) Type() fs.FileMode { return l.e.Type }
func (l *lazyEntry) Info() (fs.FileInfo, error) {
	f, err := l.d.OpenPath(l.e.Name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}
