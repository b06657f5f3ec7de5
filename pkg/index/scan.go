package index

import "github.com/cortex-sync/cortex-sync/pkg/hostfs"

// A Scan finds entries in path order, each at or past the last one
// sought: a walk in path order reads the index once, front to back, where
// a listing per directory searches it again for each. Paths in path order
// are the order of a source walk's files (a directory's entries sort as
// its name and a slash), so a walk can seek each file as it meets it.
//
// A Scan reads the index as it stood when made; an entry set since may be
// missed (a cache lookup that misses only costs a hash). It is not safe
// for use beside writes to the index unless the caller holds the lock
// that guards them.
type Scan struct {
	c    *cursor
	at   at
	path []byte // at's path
	ok   bool
	list childList // the entry found, decoded
}

// Scan starts a scan at the index's first path.
func (x *Index) Scan() *Scan {
	s := &Scan{c: x.cursor("")}
	s.next()
	return s
}

// next steps to the next live entry.
func (s *Scan) next() {
	for {
		if s.at, s.ok = s.c.step(); !s.ok {
			return
		}
		if s.at.dead() {
			continue
		}
		if s.at.b != nil {
			s.path = append(s.path[:0], s.at.b.pathView(s.at.bi)...)
		} else {
			s.path = append(s.path[:0], s.at.l.p...)
		}
		return
	}
}

// Find puts p's entry in f and reports whether there is one; p must not
// sort before a path sought before.
func (s *Scan) Find(p string, f *Found) bool {
	for s.ok && string(s.path) < p {
		s.next()
	}
	if !s.ok || string(s.path) != p {
		return false
	}
	f.set(s.at, &s.list)
	s.next()
	return true
}

// Found is an entry a Scan found, kept as the index encodes it: its row
// (the stat, and the content ID and SHA-256 as bytes) and a Git content
// ID's object ID. A check that finds nothing changed compares two of them
// (SameContent) without spelling either in hex; Entry spells the entry
// out when its strings are wanted.
type Found struct {
	r   row
	git [20]byte // a Git content ID's object ID (fCidGit)
	// whole is the entry spelled out where its strings are not the row's
	// and git alone: a layer's entry, a target, a content ID of another
	// kind.
	whole *Entry
}

// set reads the entry at a into f.
func (f *Found) set(a at, l *childList) {
	if b := a.b; b != nil {
		*f = Found{r: b.row(a.bi)}
		f.r.flags &= fEntry
		if f.r.flags&(fStr|fCidStr) == 0 && (f.r.flags&fCidGit == 0 || len(b.strBytes(f.r.cid, f.git[:0])) == len(f.git)) {
			return
		}
	}
	// Spelled out, as ChildrenOf would.
	l.buf, l.kids = l.buf[:0], l.kids[:0]
	l.add(a, nil)
	e := new(Entry)
	l.kids[0].entry(e, string(l.buf))
	*f = Found{whole: e}
}

// Stat is the entry's stat.
func (f *Found) Stat() hostfs.Stat {
	if f.whole != nil {
		return f.whole.Stat
	}
	return f.r.stat()
}

// Entry is the entry spelled out.
func (f *Found) Entry() *Entry {
	if f.whole != nil {
		return f.whole
	}
	it := item{r: f.r}
	return it.entryWith(f.git[:])
}

// HasSHA256 reports whether the entry records the SHA-256 of a content.
func (f *Found) HasSHA256() bool {
	if f.whole != nil {
		return f.whole.SHA256 != ""
	}
	return f.r.flags&fSHA != 0
}

// ContentID is the entry's content ID: one allocation, where its strings
// are not spelled out already.
func (f *Found) ContentID() string {
	if f.whole != nil {
		return f.whole.ContentID
	}
	return f.r.contentID(f.git[:], "")
}

// SameContent reports whether f and g record the same content ID; known
// is false when only the IDs spelled out can tell (either is of a kind
// kept as a string).
func (f *Found) SameContent(g *Found) (same, known bool) {
	if f.whole != nil || g.whole != nil {
		return false, false
	}
	switch kinds := f.r.flags & (fCidSum | fCidGit); {
	case kinds != g.r.flags&(fCidSum|fCidGit):
		return false, false
	case kinds == fCidGit:
		return f.git == g.git, true
	case kinds == fCidSum:
		return f.r.sum == g.r.sum, true
	}
	return false, false
}

// Intending reports whether stopped writes left intents in the index
// (reading them, when the load left them unread).
func (x *Index) Intending() bool {
	x.readIntents()
	return len(x.intents) > 0
}
