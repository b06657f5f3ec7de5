package index

import (
	"bytes"
	"encoding/hex"
	"io/fs"
	"iter"
	"slices"
	"sort"
	"strings"
	"unsafe"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// The index in memory is its base, read in place (base.go), and two
// small layers over it, sorted by path: the records of the log replayed
// at load (logged), and what was set, touched or deleted since (added);
// a nil entry in a layer is a deletion. The added layer is bounded by
// its size on the heap (layerBytes), not by a share of the tree: once
// full, it is written as a run, a base in an unnamed file beside the
// index whose rows keep the marks of what the next save is to write, and
// runs of like size are merged (a binary counter: an entry is rewritten
// about log2(entries/layer) times, and a look-up asks a few runs). Once
// the logged layer outgrows a share of the base, all of it is merged into
// a new base (a checkpoint). A sync writing a whole tree so holds a few
// MiB of entries on the heap whatever the tree's size, never the tree.

// layer is entries sorted by path.
type layer []lent

type lent struct {
	p string
	e *Entry
}

func (l layer) find(p string) (int, bool) {
	i := sort.Search(len(l), func(i int) bool { return l[i].p >= p })
	return i, i < len(l) && l[i].p == p
}

// put sets p's entry. Entries mostly come in path order, so the end is
// tried first.
func (l *layer) put(p string, e *Entry) {
	s := *l
	if n := len(s); n == 0 || s[n-1].p < p {
		*l = append(s, lent{p, e})
		return
	}
	i, ok := s.find(p)
	if ok {
		s[i].e = e
		return
	}
	*l = slices.Insert(s, i, lent{p, e})
}

func (l *layer) drop(p string) {
	if i, ok := l.find(p); ok {
		*l = slices.Delete(*l, i, i+1)
	}
}

// checkpointAt is the fewest logged entries that make a checkpoint (a
// larger base waits for an eighth of its rows), and the most added
// entries the heap holds before they are written as a run. Variables for
// tests.
var checkpointAt = 16384

// layerBytes bounds the added layer on the heap (as lentBytes counts
// it): about 6,000 entries of a mirrored file (path, SHA-256, content
// ID). A first sync of 1,000,000 files writes about 80 runs so, and
// rewrites an entry 6 or 7 times in all (the checkpoints at an eighth of
// the tree that came before rewrote it 9 times, and held an eighth of the
// tree on the heap: 40 MB at 1,000,000 files).
var layerBytes = 2 << 20

// runBlocks is the cache of a run, in blocks: a look-up in a run reads a
// few blocks (its path's row and strings, and the top of the search).
const runBlocks = 8

// lentBytes is what an entry of a layer holds on the heap, near enough:
// its place in the layer twice (a slice grows by doubling), and each
// allocation rounded up as the allocator does.
func lentBytes(p string, e *Entry) int {
	n := 2*int(unsafe.Sizeof(lent{})) + allocSize(len(p))
	if e != nil {
		n += allocSize(int(unsafe.Sizeof(Entry{}))) + allocSize(len(e.SHA256)) + allocSize(len(e.ContentID)) + allocSize(len(e.Target))
	}
	return n
}

// allocSize is n rounded up to a 16-byte step, the allocator's below 128.
func allocSize(n int) int { return (n + 15) &^ 15 }

// Get returns p's entry, a copy; nil when there is none.
func (x *Index) Get(p string) *Entry {
	if i, ok := x.added.find(p); ok {
		return copyEntry(x.added[i].e)
	}
	if b, r, ok := x.inRuns(p); ok {
		if r.flags&fDead != 0 {
			return nil
		}
		return b.entry(&r) // made afresh
	}
	if i, ok := x.logged.find(p); ok {
		return copyEntry(x.logged[i].e)
	}
	return x.inBase(p) // made afresh: no copy needed
}

// inRuns is p's row in the newest run that has one (dead: deleted since
// the load).
func (x *Index) inRuns(p string) (*base, row, bool) {
	for i := len(x.runs) - 1; i >= 0; i-- {
		b := x.runs[i]
		if p < b.first || p > b.last {
			continue
		}
		if j, ok := b.find(p); ok {
			return b, b.row(j), true
		}
	}
	return nil, row{}, false
}

func copyEntry(e *Entry) *Entry {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

// inBase is p's entry in the base, made afresh; nil when there is none.
func (x *Index) inBase(p string) *Entry {
	if b := x.base; b != nil {
		if i, ok := b.find(p); ok {
			if r := b.row(i); r.flags&fDead == 0 {
				return b.entry(&r)
			}
		}
	}
	return nil
}

// lookup is p's entry, not a copy; nil when there is none.
func (x *Index) lookup(p string) *Entry {
	if i, ok := x.added.find(p); ok {
		return x.added[i].e
	}
	return x.below(p)
}

// below is p's entry beneath the added layer.
func (x *Index) below(p string) *Entry {
	if b, r, ok := x.inRuns(p); ok {
		if r.flags&fDead != 0 {
			return nil
		}
		return b.entry(&r)
	}
	if i, ok := x.logged.find(p); ok {
		return x.logged[i].e
	}
	return x.inBase(p)
}

// holds reports whether p has an entry, and whether it is e: what Set
// asks of every entry a converged check finds as recorded, answered
// without making the entry.
func (x *Index) holds(p string, e *Entry) (exists, same bool) {
	if i, ok := x.added.find(p); ok {
		cur := x.added[i].e
		return cur != nil, cur != nil && *cur == *e
	}
	if b, r, ok := x.inRuns(p); ok {
		if r.flags&fDead != 0 {
			return false, false
		}
		return true, b.same(&r, e)
	}
	if i, ok := x.logged.find(p); ok {
		cur := x.logged[i].e
		return cur != nil, cur != nil && *cur == *e
	}
	if b := x.base; b != nil {
		if i, ok := b.find(p); ok {
			if r := b.row(i); r.flags&fDead == 0 {
				return true, b.same(&r, e)
			}
		}
	}
	return false, false
}

// Len is the number of entries.
func (x *Index) Len() int { return x.n }

// All yields the entries in path order. The index must not change while
// it runs.
func (x *Index) All() iter.Seq2[string, *Entry] {
	return func(yield func(string, *Entry) bool) {
		for it := range x.items("") {
			if it.r.flags&fDead == 0 && !yield(it.path, it.entry()) {
				return
			}
		}
	}
}

// Set records p's entry; Save writes it unless it equals the one there.
func (x *Index) Set(p string, e *Entry) {
	if e.Mode&fs.ModeSymlink != 0 && e.XXH3 != [16]byte{} {
		c := *e
		c.XXH3 = [16]byte{} // a symlink's content is its target: no row keeps one
		e = &c
	}
	exists, same := x.holds(p, e)
	if same {
		return
	}
	if !exists {
		x.n++
	}
	c := *e
	x.putAdded(p, &c)
}

// putAdded sets p's entry in the added layer, counts what it holds, and
// writes it out once full.
func (x *Index) putAdded(p string, e *Entry) {
	x.added.put(p, e)
	x.addedBytes += lentBytes(p, e)
	x.grew()
}

// Touch makes Save write p's entry again although it did not change: a
// racily clean entry verified by its hash is recorded anew, newer than its
// timestamps.
func (x *Index) Touch(p string) {
	if cur := x.lookup(p); cur != nil {
		c := *cur
		x.putAdded(p, &c)
	}
}

// Delete forgets p.
func (x *Index) Delete(p string) {
	if x.lookup(p) == nil {
		return
	}
	x.n--
	if x.below(p) == nil {
		x.added.drop(p) // never saved: nothing to write
		return
	}
	x.putAdded(p, nil)
}

// DeleteBelow forgets every entry below dir.
func (x *Index) DeleteBelow(dir string) {
	prefix := dir + "/"
	from := prefix
	for {
		var batch []string
		for it := range x.items(from) {
			if !strings.HasPrefix(it.path, prefix) || len(batch) == 1024 {
				break
			}
			if it.r.flags&fDead == 0 {
				batch = append(batch, it.path)
			}
		}
		if len(batch) == 0 {
			return
		}
		for _, p := range batch {
			x.Delete(p)
		}
		from = batch[len(batch)-1] + "\x00"
	}
}

// Dirty reports whether Save has anything to write, or intents are to be
// cleared.
func (x *Index) Dirty() bool {
	return x.changed() || x.intentLog || x.ilog != nil
}

// changed reports whether entries changed since the load.
func (x *Index) changed() bool {
	return len(x.added) > 0 || len(x.runs) > 0 || x.rewrite || x.base != nil && x.base.changed > 0
}

// spilled reports whether the index holds more than its files on disk
// say, in files of its own: a checkpoint or runs.
func (x *Index) spilled() bool {
	return len(x.runs) > 0 || x.base != nil && x.base.marked
}

// changes yields the paths Save is to write, in order, with their entries
// (nil: deleted).
func (x *Index) changes() iter.Seq2[string, *Entry] {
	return func(yield func(string, *Entry) bool) {
		if len(x.runs) == 0 && (x.base == nil || x.base.changed == 0) {
			// Only what was added since the load: no need to read the base.
			for _, l := range x.added {
				var e *Entry
				if l.e != nil {
					c := *l.e
					e = &c
				}
				if !yield(l.p, e) {
					return
				}
			}
			return
		}
		for it := range x.items("") {
			if it.r.flags&fChanged == 0 {
				continue
			}
			var e *Entry
			if it.r.flags&fDead == 0 {
				e = it.entry()
			}
			if !yield(it.path, e) {
				return
			}
		}
	}
}

// Child is a name directly in an index directory: its entry, nil when only
// entries below it are recorded; the entries stopped writes intended
// there; and whether there are entries or intents below.
type Child struct {
	Entry   *Entry
	Intents []*Entry
	Below   bool
}

// Kids are the names directly in an index directory, in name order, and
// each one's Child: what ChildrenOf lists. A Kids is used again by each
// call: the entries of the last call are good until the next one, their
// strings for good.
type Kids struct {
	Names []string
	Of    []Child
	ents  []Entry
	list  childList
}

// Find is name's Child, by a binary search.
func (k *Kids) Find(name string) (Child, bool) {
	i, ok := slices.BinarySearch(k.Names, name)
	if !ok {
		return Child{}, false
	}
	return k.Of[i], true
}

// Keep keeps the names keep reports true for, and drops the others.
func (k *Kids) Keep(keep func(name string) bool) {
	n := 0
	for i, name := range k.Names {
		if keep(name) {
			k.Names[n], k.Of[n] = name, k.Of[i]
			n++
		}
	}
	clear(k.Of[n:])
	k.Names, k.Of = k.Names[:n], k.Of[:n]
}

// Reset empties k.
func (k *Kids) Reset() {
	clear(k.Of)
	k.Names, k.Of = k.Names[:0], k.Of[:0]
}

// sort orders the names and merges a name's entry, intents and Below.
func (k *Kids) sort() {
	if !slices.IsSorted(k.Names) {
		sort.Stable(kidsOrder{k})
	}
	n := 0
	for i := range k.Names {
		if n > 0 && k.Names[n-1] == k.Names[i] {
			c, d := &k.Of[n-1], k.Of[i]
			c.Below = c.Below || d.Below
			if d.Entry != nil {
				c.Entry = d.Entry
			}
			c.Intents = append(c.Intents, d.Intents...)
			continue
		}
		k.Names[n], k.Of[n] = k.Names[i], k.Of[i]
		n++
	}
	clear(k.Of[n:])
	k.Names, k.Of = k.Names[:n], k.Of[:n]
}

// kidsOrder sorts a Kids' names and children together.
type kidsOrder struct{ k *Kids }

func (o kidsOrder) Len() int           { return len(o.k.Names) }
func (o kidsOrder) Less(i, j int) bool { return o.k.Names[i] < o.k.Names[j] }
func (o kidsOrder) Swap(i, j int) {
	o.k.Names[i], o.k.Names[j] = o.k.Names[j], o.k.Names[i]
	o.k.Of[i], o.k.Of[j] = o.k.Of[j], o.k.Of[i]
}

// ChildrenOf lists the names directly in dir ("" is the top) into k: a
// contiguous run of entries, whose subdirectories are stepped over by
// search. The strings of one call share one allocation, however many
// there are: a converged check lists every directory of a tree.
func (x *Index) ChildrenOf(dir string, k *Kids) {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	k.Names, k.Of = k.Names[:0], k.Of[:0]
	kids := &k.list
	kids.buf, kids.kids = kids.buf[:0], kids.kids[:0]
	var below []span // names with entries below them, in kids.buf
	var seek []byte
	c := x.cursor(prefix)
	for {
		a, ok := c.step()
		if !ok {
			break
		}
		// Whether it is dead is read first: a path viewed in the block
		// cache is good only until the next read.
		dead := a.dead()
		var p []byte
		if a.b != nil {
			p = a.b.pathView(a.bi)
		} else {
			p = unsafe.Slice(unsafe.StringData(a.l.p), len(a.l.p))
		}
		if !bytes.HasPrefix(p, []byte(prefix)) {
			break
		}
		rest := p[len(prefix):]
		if j := bytes.IndexByte(rest, '/'); j >= 0 {
			if dead {
				continue
			}
			below = append(below, kids.put(rest[:j]))
			seek = append(append(append(seek[:0], prefix...), rest[:j]...), '0') // '0' follows '/': past name's entries
			c.seek(unsafe.String(unsafe.SliceData(seek), len(seek)))
			continue
		}
		if dead {
			continue
		}
		kids.add(a, rest)
	}
	all := string(kids.buf)
	k.ents = slices.Grow(k.ents[:0], len(kids.kids))[:len(kids.kids)]
	for i := range kids.kids {
		kid := &kids.kids[i]
		e := &k.ents[i]
		kid.entry(e, all)
		k.Names = append(k.Names, all[kid.name.from:kid.name.to])
		k.Of = append(k.Of, Child{Entry: e})
	}
	for _, b := range below {
		k.Names = append(k.Names, all[b.from:b.to])
		k.Of = append(k.Of, Child{Below: true})
	}
	x.intendedChildren(prefix, k)
	k.sort()
}

// childList gathers the entries ChildrenOf and a Scan find: their names and strings
// one after another in one buffer, made a string once at the end, and
// the entries copied out into a slice of their own.
type childList struct {
	buf  []byte
	kids []child
}

type child struct {
	name, cid, sha, target span
	e                      Entry // its strings set at the end
}

// entry sets e to the child's entry, its strings cut from all (the
// buffer as a string).
func (k *child) entry(e *Entry, all string) {
	*e = k.e
	cut := func(sp span) string { return all[sp.from:sp.to] }
	if k.cid != (span{}) {
		e.ContentID = cut(k.cid)
	}
	if k.sha != (span{}) {
		e.SHA256 = cut(k.sha)
	}
	if k.target != (span{}) {
		e.Target = cut(k.target)
	}
}

// span is where a string lies in the buffer.
type span struct{ from, to int }

func (l *childList) put(b []byte) span {
	from := len(l.buf)
	l.buf = append(l.buf, b...)
	return span{from, len(l.buf)}
}

func (l *childList) putHex(prefix string, raw []byte) span {
	from := len(l.buf)
	l.buf = hex.AppendEncode(append(l.buf, prefix...), raw)
	return span{from, len(l.buf)}
}

// add records the entry at a, named name, as entryWith would make it.
func (l *childList) add(a at, name []byte) {
	k := child{name: l.put(name)}
	b := a.b
	if b == nil {
		k.e = *a.l.e // a layer's: its strings are there already
		l.kids = append(l.kids, k)
		return
	}
	r := b.row(a.bi)
	k.e.Stat, k.e.XXH3 = r.stat(), r.xxh3()
	var scratch [64]byte
	switch {
	case r.flags&fCidSum != 0:
		k.cid = l.putHex("sha256:", r.sum[:])
	case r.flags&fCidGit != 0:
		k.cid = l.putHex("git:", b.strBytes(r.cid, scratch[:0]))
	case r.flags&fCidStr != 0:
		k.cid = l.put(b.strBytes(r.cid, scratch[:0]))
	}
	switch {
	case r.flags&fSHA != 0 && r.flags&fCidSum != 0:
		k.sha = span{k.cid.from + 7, k.cid.to}
	case r.flags&fSHA != 0:
		k.sha = l.putHex("", r.sum[:])
	case r.flags&fStr != 0 && r.mode&fs.ModeSymlink != 0:
		k.target = l.put(b.strBytes(r.str, scratch[:0]))
	case r.flags&fStr != 0:
		k.sha = l.put(b.strBytes(r.str, scratch[:0]))
	}
	l.kids = append(l.kids, k)
}

// cursor walks the base, the runs and the layers in path order; where
// they hold the same path, the newest wins: the added layer, then the
// runs from the newest, then the logged layer, then the base.
type item struct {
	path, str, cid string
	r              row
}

type cursor struct {
	b             *base
	bi            int
	runs          []*base // the newest first
	ri            []int
	rv            [][]byte // each run's path where it stands, in a step
	logged, added layer
	li, ai        int
}

// cursor starts at the first path not below from. The index must not
// change while it is used.
func (x *Index) cursor(from string) *cursor {
	c := &cursor{b: x.base, logged: x.logged, added: x.added}
	if n := len(x.runs); n > 0 {
		c.runs, c.ri, c.rv = make([]*base, n), make([]int, n), make([][]byte, n)
		for i, r := range x.runs {
			c.runs[n-1-i] = r
		}
	}
	c.seek(from)
	return c
}

// seek moves the cursor to the first path not below from; from is not
// kept.
func (c *cursor) seek(from string) {
	if c.b != nil {
		c.bi = c.b.search(from)
	}
	for i, r := range c.runs {
		c.ri[i] = r.search(from)
	}
	c.li, _ = c.logged.find(from)
	c.ai, _ = c.added.find(from)
}

// at is where the cursor stands: row bi of base b (the base or a run), or
// a layer's entry (l, b nil) with the marks it carries.
type at struct {
	b     *base
	bi    int
	l     *lent
	marks uint16
}

// dead reports whether the entry at a is deleted.
func (a at) dead() bool {
	if a.b != nil {
		return a.b.row(a.bi).flags&fDead != 0
	}
	return a.l.e == nil
}

// bytesOf is s's bytes, not a copy.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// step moves to the next entry of the merge, without reading its
// strings; a deletion logged since the base was written hides the row.
// The paths of the bases are viewed where they lie in their caches: each
// base is read once a step, so every view stays good through it.
func (c *cursor) step() (at, bool) {
	for {
		var p []byte // the least path of the levels
		have := false
		if c.ai < len(c.added) {
			p, have = bytesOf(c.added[c.ai].p), true
		}
		for i, r := range c.runs {
			c.rv[i] = nil
			if c.ri[i] < r.n {
				v := r.pathView(c.ri[i])
				c.rv[i] = v
				if !have || bytes.Compare(v, p) < 0 {
					p, have = v, true
				}
			}
		}
		if c.li < len(c.logged) {
			if v := bytesOf(c.logged[c.li].p); !have || bytes.Compare(v, p) < 0 {
				p, have = v, true
			}
		}
		var bv []byte
		if c.b != nil && c.bi < c.b.n {
			bv = c.b.pathView(c.bi)
			if !have || bytes.Compare(bv, p) < 0 {
				p, have = bv, true
			}
		}
		if !have {
			return at{}, false
		}
		// The newest level at p wins; every level at p moves past it.
		var a at
		won, ok := false, true
		if c.ai < len(c.added) && c.added[c.ai].p == string(p) {
			a.l, a.marks, won = &c.added[c.ai], fChanged, true
			c.ai++
		}
		for i, r := range c.runs {
			if c.rv[i] != nil && bytes.Equal(c.rv[i], p) {
				if !won {
					a.b, a.bi, won = r, c.ri[i], true
				}
				c.ri[i]++
			}
		}
		if c.li < len(c.logged) && c.logged[c.li].p == string(p) {
			if !won {
				a.l, won = &c.logged[c.li], true
				ok = c.logged[c.li].e != nil
			}
			c.li++
		}
		if bv != nil && bytes.Equal(bv, p) {
			if !won {
				a.b, a.bi = c.b, c.bi
			}
			c.bi++
		}
		if ok {
			return a, true
		}
	}
}

func (c *cursor) next() (item, bool) {
	a, ok := c.step()
	switch {
	case !ok:
		return item{}, false
	case a.b != nil:
		return a.b.item(a.bi), true
	}
	return layerItem(*a.l, a.marks), true
}

// items yields the merge from the first path not below from, the deleted
// entries that are still to be written included.
func (x *Index) items(from string) iter.Seq[item] {
	return func(yield func(item) bool) {
		c := x.cursor(from)
		for {
			it, ok := c.next()
			if !ok || !yield(it) {
				return
			}
		}
	}
}

// layerItem is a layer's entry as an item with the given marks; a
// deletion is a dead row.
func layerItem(l lent, marks uint16) item {
	it := item{path: l.p}
	if l.e == nil {
		it.r.flags = fDead | marks
		return it
	}
	it.r, it.str, it.cid = encodeEntry(l.e)
	it.r.flags |= marks
	return it
}

// grew writes the added layer out as a run once it is full, and
// checkpoints a large logged layer.
func (x *Index) grew() {
	if x.replaying || x.spill.IsZero() {
		return
	}
	limit := checkpointAt
	if x.base != nil {
		limit = max(limit, x.base.n/8)
	}
	if k := len(x.logged); k >= limit && k >= 2*x.spillFailed {
		if err := x.checkpoint(); err != nil {
			x.spillFailed = k // try again when twice as large
		}
		return
	}
	if k := len(x.added); (k >= checkpointAt || x.addedBytes >= layerBytes) && k >= 2*x.spillFailed {
		if err := x.pushRun(); err != nil {
			x.spillFailed = k
		}
	}
}

// pushRun writes the added layer as a run in an unnamed file in the
// spill directory, marks kept, empties the layer, and merges the newest
// runs while the one before is less than twice as large. A run is never a
// saved index: if writing it fails, the layer stays as it was; if a merge
// fails, the runs stay as they were; if the process dies, the files go
// with it.
func (x *Index) pushRun() error {
	r, err := x.writeRun(len(x.added), func(yield func(item) bool) {
		for _, l := range x.added {
			if !yield(layerItem(l, fChanged)) {
				return
			}
		}
	})
	if err != nil {
		return err
	}
	r.cache.slots = runBlocks
	x.runs = append(x.runs, r)
	clear(x.added)
	x.added, x.addedBytes = x.added[:0], 0
	for k := len(x.runs); k >= 2 && x.runs[k-2].n < 2*x.runs[k-1].n; k = len(x.runs) {
		older, newer := x.runs[k-2], x.runs[k-1]
		c := &cursor{runs: []*base{newer, older}, ri: make([]int, 2), rv: make([][]byte, 2)}
		n := 0
		for _, ok := c.step(); ok; _, ok = c.step() {
			n++
		}
		c.ri[0], c.ri[1] = 0, 0
		m, err := x.writeRun(n, func(yield func(item) bool) {
			for it, ok := c.next(); ok && yield(it); it, ok = c.next() {
			}
		})
		if err != nil {
			return nil // more runs than need be, all of them right
		}
		older.f.Close()
		newer.f.Close()
		m.cache.slots = runBlocks
		x.runs = append(x.runs[:k-2], m)
	}
	return nil
}

// writeRun writes n items, in path order, as a marked base in an unnamed
// file in the spill directory.
func (x *Index) writeRun(n int, items iter.Seq[item]) (*base, error) {
	f, err := x.spill.Scratch()
	if err != nil {
		return nil, err
	}
	w := newBaseWriter(f, n)
	for it := range items {
		w.add(&it)
	}
	if err := w.finish(); err != nil {
		f.Close()
		return nil, err
	}
	b, err := newBase(f, nil, w.size(), true)
	if err != nil {
		f.Close()
		return nil, err
	}
	b.live, b.changed, b.first, b.last = w.live, w.changed, w.first, w.last
	return b, nil
}

// checkpoint merges the base, the runs and the layers into a new base in
// an unnamed file in the spill directory, marks kept, and empties the
// layers. A checkpoint is never a saved index: if it fails, the layers
// stay as they were; if the process dies, the file goes with it.
func (x *Index) checkpoint() error {
	n := 0
	for range x.items("") {
		n++
	}
	b, err := x.writeRun(n, x.items(""))
	if err != nil {
		return err
	}
	if old := x.base; old != nil && old.marked && old.f != nil {
		old.f.Close() // a checkpoint superseded: its space goes back now
	}
	x.closeRuns()
	x.base, x.logged, x.added, x.addedBytes = b, nil, nil, 0
	return nil
}

// closeRuns lets the runs' files go.
func (x *Index) closeRuns() {
	for _, r := range x.runs {
		r.f.Close()
	}
	x.runs = nil
}

// encodeEntry is an entry as a row (its strings apart). A symlink keeps
// its Target and a file its SHA256, as the log's encoding does.
func encodeEntry(e *Entry) (r row, str, cid string) {
	r, str, cid, raw := encodeRow(e)
	if r.flags&fCidGit != 0 {
		cid = string(raw[:])
	}
	return r, str, cid
}

// encodeRow is encodeEntry without an allocation: a Git content ID's
// bytes are in raw.
func encodeRow(e *Entry) (r row, str, cid string, raw [20]byte) {
	r.ino, r.size, r.mtime, r.ctime, r.mode = int64(e.Ino), e.Size, e.Mtime, e.Ctime, e.Mode
	r.uid, r.gid = e.UID, e.GID
	sumFree := true
	switch {
	case e.Mode&fs.ModeSymlink != 0:
		if e.Target != "" {
			str, r.flags = e.Target, r.flags|fStr
		}
	case len(e.SHA256) == 64 && isHex(e.SHA256):
		hexDecode(r.sum[:], e.SHA256)
		r.flags |= fSHA
		sumFree = false
	case e.SHA256 != "":
		str, r.flags = e.SHA256, r.flags|fStr
	}
	if e.Mode&fs.ModeSymlink == 0 && e.XXH3 != ([16]byte{}) {
		r.xxh, r.flags = e.XXH3, r.flags|fXXH
	}
	id := e.ContentID
	switch {
	case id == "":
	case !sumFree && len(id) == 71 && id[:7] == "sha256:" && id[7:] == e.SHA256:
		r.flags |= fCidSum
	case sumFree && len(id) == 71 && id[:7] == "sha256:" && isHex(id[7:]):
		hexDecode(r.sum[:], id[7:])
		r.flags |= fCidSum
	case len(id) == 44 && id[:4] == "git:" && isHex(id[4:]):
		hexDecode(raw[:], id[4:])
		r.flags |= fCidGit
	default:
		cid, r.flags = id, r.flags|fCidStr
	}
	return r, str, cid, raw
}

// hexDecode decodes s, lowercase hex (isHex), into dst without the copy
// hex.Decode of a string would make.
func hexDecode(dst []byte, s string) {
	for i := range dst {
		dst[i] = unhex(s[2*i])<<4 | unhex(s[2*i+1])
	}
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// entry rebuilds an item's entry. A SHA-256 that is also the content ID
// shares its string.
func (it *item) entry() *Entry {
	var raw []byte
	if it.r.flags&fCidGit != 0 {
		raw = []byte(it.cid)
	}
	return it.entryWith(raw)
}

// entryWith is entry with a Git content ID's bytes given.
func (it *item) entryWith(raw []byte) *Entry {
	r := &it.r
	e := &Entry{Stat: r.stat(), ContentID: r.contentID(raw, it.cid), XXH3: r.xxh3()}
	var buf [64]byte
	switch {
	case r.flags&fSHA != 0 && r.flags&fCidSum != 0:
		e.SHA256 = e.ContentID[7:]
	case r.flags&fSHA != 0:
		e.SHA256 = string(hex.AppendEncode(buf[:0], r.sum[:]))
	case r.flags&fStr != 0 && r.mode&fs.ModeSymlink != 0:
		e.Target = it.str
	case r.flags&fStr != 0:
		e.SHA256 = it.str
	}
	return e
}

// xxh3 is the row's XXH3, zero where it records none.
func (r *row) xxh3() [16]byte {
	if r.flags&fXXH == 0 {
		return [16]byte{}
	}
	return r.xxh
}

// stat is the row's stat.
func (r *row) stat() hostfs.Stat {
	return hostfs.Stat{Ino: uint64(r.ino), Size: r.size, Mtime: r.mtime, Ctime: r.ctime, Mode: r.mode, UID: r.uid, GID: r.gid}
}

// contentID spells the row's content ID: a Git one from its object ID's
// bytes (raw), one kept as a string (cid) as it is.
func (r *row) contentID(raw []byte, cid string) string {
	var buf [len("sha256:") + 64]byte
	switch {
	case r.flags&fCidSum != 0:
		return string(hex.AppendEncode(append(buf[:0], "sha256:"...), r.sum[:]))
	case r.flags&fCidGit != 0:
		return string(hex.AppendEncode(append(buf[:0], "git:"...), raw))
	case r.flags&fCidStr != 0:
		return cid
	}
	return ""
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
