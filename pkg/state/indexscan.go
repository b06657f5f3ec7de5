package state

import "unsafe"

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
		if s.at.dead(s.c.b) {
			continue
		}
		if s.at.bi >= 0 {
			s.path = append(s.path[:0], s.c.b.pathView(s.at.bi)...)
		} else {
			s.path = append(s.path[:0], s.at.l.p...)
		}
		return
	}
}

// Find puts p's entry in e and reports whether there is one; p must not
// sort before a path sought before. The entry's strings are appended to
// arena and cut from it: the caller must never write over what arena
// holds (a fresh buffer, only appended to, does).
func (s *Scan) Find(p string, e *IndexEntry, arena *[]byte) bool {
	for s.ok && string(s.path) < p {
		s.next()
	}
	if !s.ok || string(s.path) != p {
		return false
	}
	l := &s.list
	l.buf, l.kids = l.buf[:0], l.kids[:0]
	l.add(s.c.b, s.at, nil)
	all := ""
	if len(l.buf) > 0 {
		from := len(*arena)
		*arena = append(*arena, l.buf...)
		all = unsafe.String(&(*arena)[from], len(l.buf))
	}
	l.kids[0].entry(e, all)
	s.next()
	return true
}

// Intending reports whether stopped writes left intents in the index
// (reading them, when the load left them unread).
func (x *Index) Intending() bool {
	x.readIntents()
	return len(x.intents) > 0
}
