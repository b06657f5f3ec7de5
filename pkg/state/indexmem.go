package state

import (
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"iter"
	"slices"
	"sort"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// The index in memory: the entries as loaded (or as of the last save) are
// rows of fixed size sorted by path, their strings in one arena, a SHA-256
// as 32 bytes and a content ID derived from it where it can be. A tree of
// 45,000 files costs about 90 bytes an entry and its path, where a map of
// pointers to entries of strings cost 290. Paths new since then wait in a
// small map until the next save or until it grows, then join the rows.

// row is one entry of the sorted part.
type row struct {
	ino, size, mtime, ctime int64
	sum                     [32]byte
	path, str, cid          uint32 // offsets into the arena (see put)
	mode                    fs.FileMode
	owner                   uint32 // index into Index.owners
	flags                   uint16
}

const (
	fSHA     uint16 = 1 << iota // SHA256 is hex(sum)
	fStr                        // str holds Target (symlinks) or a SHA256 that is not 64 hex digits
	fCidSum                     // ContentID is "sha256:" + hex(sum)
	fCidGit                     // cid holds the 20 bytes of "git:" + hex
	fCidStr                     // cid holds ContentID as is
	fDead                       // deleted since the last save
	fChanged                    // to be written by the next save
)

// owner is a uid and gid pair: a tree has few, so rows keep an index.
type owner struct{ uid, gid uint32 }

// arena holds the rows' strings, each as a uvarint length and its bytes;
// what get returns shares its memory.
type arena struct{ b *strings.Builder }

func (a *arena) put(s string) uint32 {
	if a.b == nil {
		a.b = &strings.Builder{}
	}
	off := uint32(a.b.Len())
	var tmp [binary.MaxVarintLen64]byte
	a.b.Write(tmp[:binary.PutUvarint(tmp[:], uint64(len(s)))])
	a.b.WriteString(s)
	return off
}

func (a *arena) get(off uint32) string {
	s := a.b.String()[off:]
	var l uint64
	var shift uint
	i := 0
	for ; ; i++ {
		c := s[i]
		l |= uint64(c&0x7f) << shift
		if c < 0x80 {
			break
		}
		shift += 7
	}
	i++
	return s[i : i+int(l)]
}

// isHex reports whether s is lowercase hex, as hex.EncodeToString writes.
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Get returns p's entry, a copy; nil when there is none.
func (x *Index) Get(p string) *IndexEntry {
	if e, ok := x.added[p]; ok {
		c := *e
		return &c
	}
	if i, ok := x.find(p); ok && x.rows[i].flags&fDead == 0 {
		return x.entryOf(&x.rows[i])
	}
	return nil
}

// Len is the number of entries.
func (x *Index) Len() int { return x.n }

// sortedAdded is the paths added since the rows were last merged, in order.
func (x *Index) sortedAdded() []string {
	added := make([]string, 0, len(x.added))
	for p := range x.added {
		added = append(added, p)
	}
	slices.Sort(added)
	return added
}

// All yields the entries in path order.
func (x *Index) All() iter.Seq2[string, *IndexEntry] {
	return func(yield func(string, *IndexEntry) bool) {
		added := x.sortedAdded()
		i, j := 0, 0
		for i < len(x.rows) || j < len(added) {
			if i < len(x.rows) && x.rows[i].flags&fDead != 0 {
				i++
				continue
			}
			if j == len(added) || i < len(x.rows) && x.arena.get(x.rows[i].path) < added[j] {
				if !yield(x.arena.get(x.rows[i].path), x.entryOf(&x.rows[i])) {
					return
				}
				i++
				continue
			}
			c := *x.added[added[j]]
			if !yield(added[j], &c) {
				return
			}
			j++
		}
	}
}

// Set records p's entry; Save writes it unless it equals the one there.
func (x *Index) Set(p string, e *IndexEntry) {
	if prev, ok := x.added[p]; ok {
		if *prev != *e {
			c := *e
			x.added[p] = &c
		}
		return
	}
	i, ok := x.find(p)
	if !ok {
		c := *e
		x.added[p] = &c
		x.n++
		if len(x.added) >= 1024 && len(x.added) >= len(x.rows)/8 {
			x.fold(false)
		}
		return
	}
	r := &x.rows[i]
	if r.flags&fDead == 0 && *x.entryOf(r) == *e {
		return
	}
	if r.flags&fDead != 0 {
		x.n++
	}
	keep := r.path
	*r = row{path: keep, flags: fChanged}
	x.fill(r, e)
}

// Touch makes Save write p's entry again although it did not change: a
// racily clean entry verified by its hash is recorded anew, newer than its
// timestamps.
func (x *Index) Touch(p string) {
	if i, ok := x.find(p); ok && x.rows[i].flags&fDead == 0 {
		x.rows[i].flags |= fChanged
	}
}

// Delete forgets p.
func (x *Index) Delete(p string) {
	if _, ok := x.added[p]; ok {
		delete(x.added, p) // never saved: nothing to write
		x.n--
		return
	}
	if i, ok := x.find(p); ok && x.rows[i].flags&fDead == 0 {
		x.rows[i].flags |= fDead | fChanged
		x.n--
	}
}

// Dirty reports whether Save has anything to write.
func (x *Index) Dirty() bool {
	if len(x.added) > 0 {
		return true
	}
	for i := range x.rows {
		if x.rows[i].flags&fChanged != 0 {
			return true
		}
	}
	return false
}

// changes yields the paths Save is to write, in order, with their entries
// (nil: deleted).
func (x *Index) changes() iter.Seq2[string, *IndexEntry] {
	return func(yield func(string, *IndexEntry) bool) {
		added := x.sortedAdded()
		i, j := 0, 0
		for i < len(x.rows) || j < len(added) {
			if i < len(x.rows) && x.rows[i].flags&fChanged == 0 {
				i++
				continue
			}
			if j == len(added) || i < len(x.rows) && x.arena.get(x.rows[i].path) < added[j] {
				r := &x.rows[i]
				var e *IndexEntry
				if r.flags&fDead == 0 {
					e = x.entryOf(r)
				}
				if !yield(x.arena.get(r.path), e) {
					return
				}
				i++
				continue
			}
			if !yield(added[j], x.added[added[j]]) {
				return
			}
			j++
		}
	}
}

// find is the row of p, or where it would go.
func (x *Index) find(p string) (int, bool) {
	i := sort.Search(len(x.rows), func(i int) bool { return x.arena.get(x.rows[i].path) >= p })
	return i, i < len(x.rows) && x.arena.get(x.rows[i].path) == p
}

// entryOf rebuilds a row's entry.
func (x *Index) entryOf(r *row) *IndexEntry {
	o := x.owners[r.owner]
	e := &IndexEntry{Stat: statOf(r, o)}
	if r.flags&fSHA != 0 {
		e.SHA256 = hex.EncodeToString(r.sum[:])
	}
	if r.flags&fStr != 0 {
		if r.mode&fs.ModeSymlink != 0 {
			e.Target = x.arena.get(r.str)
		} else {
			e.SHA256 = x.arena.get(r.str)
		}
	}
	switch {
	case r.flags&fCidSum != 0:
		e.ContentID = "sha256:" + hex.EncodeToString(r.sum[:])
	case r.flags&fCidGit != 0:
		e.ContentID = "git:" + hex.EncodeToString([]byte(x.arena.get(r.cid)))
	case r.flags&fCidStr != 0:
		e.ContentID = x.arena.get(r.cid)
	}
	return e
}

func statOf(r *row, o owner) (s hostfs.Stat) {
	s.Ino, s.Size, s.Mtime, s.Ctime, s.Mode, s.UID, s.GID = uint64(r.ino), r.size, r.mtime, r.ctime, r.mode, o.uid, o.gid
	return s
}

// fill sets a row's fields from an entry; its path and flags stay. A
// symlink keeps its Target and a file its SHA256, as the encoding does.
func (x *Index) fill(r *row, e *IndexEntry) {
	r.ino, r.size, r.mtime, r.ctime, r.mode = int64(e.Ino), e.Size, e.Mtime, e.Ctime, e.Mode
	r.owner = x.ownerOf(owner{e.UID, e.GID})
	sumFree := true
	switch {
	case e.Mode&fs.ModeSymlink != 0:
		if e.Target != "" {
			r.str, r.flags = x.arena.put(e.Target), r.flags|fStr
		}
	case len(e.SHA256) == 64 && isHex(e.SHA256):
		hex.Decode(r.sum[:], []byte(e.SHA256))
		r.flags |= fSHA
		sumFree = false
	case e.SHA256 != "":
		r.str, r.flags = x.arena.put(e.SHA256), r.flags|fStr
	}
	id := e.ContentID
	switch {
	case id == "":
	case !sumFree && len(id) == 71 && id[:7] == "sha256:" && id[7:] == e.SHA256:
		r.flags |= fCidSum
	case sumFree && len(id) == 71 && id[:7] == "sha256:" && isHex(id[7:]):
		hex.Decode(r.sum[:], []byte(id[7:]))
		r.flags |= fCidSum
	case len(id) == 44 && id[:4] == "git:" && isHex(id[4:]):
		var raw [20]byte
		hex.Decode(raw[:], []byte(id[4:]))
		r.cid, r.flags = x.arena.put(string(raw[:])), r.flags|fCidGit
	default:
		r.cid, r.flags = x.arena.put(id), r.flags|fCidStr
	}
}

func (x *Index) ownerOf(o owner) uint32 {
	for i, have := range x.owners { // a tree has one or two
		if have == o {
			return uint32(i)
		}
	}
	if x.ownerIdx == nil && len(x.owners) >= 8 {
		x.ownerIdx = make(map[owner]uint32, len(x.owners))
		for i, have := range x.owners {
			x.ownerIdx[have] = uint32(i)
		}
	}
	if x.ownerIdx != nil {
		if i, ok := x.ownerIdx[o]; ok {
			return i
		}
		x.ownerIdx[o] = uint32(len(x.owners))
	}
	x.owners = append(x.owners, o)
	return uint32(len(x.owners) - 1)
}

// fold merges the added entries into the rows, in place: their strings
// join the arena and the rows move up from the back, so the index never
// exists twice. Saved, the dead rows go and nothing is left to write; else
// both stay marked.
func (x *Index) fold(saved bool) {
	added := make([]string, 0, len(x.added))
	for p := range x.added {
		added = append(added, p)
	}
	slices.Sort(added)
	n, k := len(x.rows), len(added)
	x.rows = slices.Grow(x.rows, k)[:n+k]
	i, j := n-1, k-1
	for out := n + k - 1; j >= 0; out-- {
		if i >= 0 && x.arena.get(x.rows[i].path) > added[j] {
			x.rows[out] = x.rows[i]
			i--
			continue
		}
		r := row{path: x.arena.put(added[j]), flags: fChanged}
		x.fill(&r, x.added[added[j]])
		x.rows[out] = r
		j--
	}
	clear(x.added)
	if !saved {
		return
	}
	live := x.rows[:0]
	for _, r := range x.rows {
		if r.flags&fDead == 0 {
			r.flags &^= fChanged
			live = append(live, r)
		}
	}
	clear(x.rows[len(live):])
	x.rows = live
}

// saved marks everything written: rows deleted or added make new rows,
// else only the marks are cleared (a log replayed at load changes rows in
// place, and copying them all would double the index's peak).
func (x *Index) saved() {
	fold := len(x.added) > 0
	for i := range x.rows {
		if x.rows[i].flags&fDead != 0 {
			fold = true
			break
		}
	}
	if fold {
		x.fold(true)
		return
	}
	for i := range x.rows {
		x.rows[i].flags &^= fChanged
	}
}

// Child is a name directly in an index directory: its entry, nil when only
// entries below it are recorded, and whether there are any.
type Child struct {
	Entry *IndexEntry
	Below bool
}

// Children lists the names directly in dir ("" is the top): a contiguous
// run of rows, whose subdirectories are stepped over by search.
func (x *Index) Children(dir string) map[string]Child {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	out := map[string]Child{}
	add := func(rest string, e func() *IndexEntry) (sub string) {
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			c := out[rest[:j]]
			c.Below = true
			out[rest[:j]] = c
			return rest[:j]
		}
		c := out[rest]
		c.Entry = e()
		out[rest] = c
		return ""
	}
	i, _ := x.find(prefix)
	for i < len(x.rows) {
		r := &x.rows[i]
		p := x.arena.get(r.path)
		if !strings.HasPrefix(p, prefix) {
			break
		}
		if r.flags&fDead != 0 {
			i++
			continue
		}
		if sub := add(p[len(prefix):], func() *IndexEntry { return x.entryOf(r) }); sub != "" {
			i, _ = x.find(prefix + sub + "0") // '0' follows '/': past sub's entries
			continue
		}
		i++
	}
	for p, e := range x.added {
		if strings.HasPrefix(p, prefix) {
			add(p[len(prefix):], func() *IndexEntry { c := *e; return &c })
		}
	}
	return out
}

// DeleteBelow forgets every entry below dir.
func (x *Index) DeleteBelow(dir string) {
	prefix := dir + "/"
	i, _ := x.find(prefix)
	for ; i < len(x.rows) && strings.HasPrefix(x.arena.get(x.rows[i].path), prefix); i++ {
		if x.rows[i].flags&fDead == 0 {
			x.rows[i].flags |= fDead | fChanged
			x.n--
		}
	}
	for p := range x.added {
		if strings.HasPrefix(p, prefix) {
			delete(x.added, p)
			x.n--
		}
	}
}
