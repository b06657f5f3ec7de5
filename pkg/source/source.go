// Package source fetches desired state: a revision and a read-only tree of
// the repository it names. Trees give content IDs cheaply (a Git blob ID, a
// stat-cached digest) so the engine never re-hashes the desired side.
package source

import (
	"context"
	"io"
	"io/fs"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Source is somewhere desired state comes from.
type Source interface {
	// Fetch makes a revision available as a tree. The caller closes it.
	Fetch(ctx context.Context) (*Checkout, error)
	// Ref describes the source, as the snapshot records it.
	Ref() state.Source
}

// Checkout is one fetched revision.
type Checkout struct {
	Revision string // e.g. "main@sha1:…"; empty for a plain directory
	Tree     Tree
	Path     string // where the manifests are inside Tree
	// Subject is the first line of the commit's message; empty for a
	// plain directory.
	Subject string
	// Notes are things the user should hear about, such as a force-push.
	Notes []string
}

// Close releases the tree.
func (c *Checkout) Close() error { return c.Tree.Close() }

// Tree is a read-only repository tree.
type Tree interface {
	fs.FS
	// Walk calls fn for every entry below dir, parents before children, in
	// lexical order, with paths relative to dir.
	Walk(dir string, fn func(Entry) error) error
	// ContentID names the content of the regular file at name.
	ContentID(name string) (string, error)
	Close() error
}

// Entry is one item of a tree walk.
type Entry struct {
	Path   string      // relative to the walked directory, slash-separated
	Mode   fs.FileMode // type and permission bits
	Size   int64
	Target string // a symlink's target
	// ContentID names a regular file's content; cheap when the tree knows
	// it (nil when File answers: use ID).
	ContentID func() (string, error)
	// Open, when not nil, reads a regular file's content faster than the
	// tree's Open by path (a Git blob by its ID). It is safe to call from
	// many goroutines.
	Open func() (io.ReadCloser, error)
	// Digested, when not nil, takes the SHA-256 (hex) of the content as a
	// caller read it whole through Open and returns the content ID: a tree
	// whose IDs are digests is spared a second read of what was copied.
	Digested func(sum string) string
	// Legacy, when not nil, names the content as cortex-sync named it
	// before content IDs were Git blob IDs everywhere: a record of then
	// still compares.
	Legacy func() (string, error)
	// File, when not nil, answers for a regular file in place of
	// ContentID, Open, Digested and Legacy, which are then nil: a tree
	// that knows its files as values (a directory's walk) spares an
	// allocation per function per file. Use ID, OpenFunc, DigestedFunc and
	// LegacyFunc, which ask whichever is set.
	File File
}

// File is what a tree knows of one of its regular files (see Entry).
type File interface {
	ContentID() (string, error)
	Open() (io.ReadCloser, error)
	Digested(sum string) string
	LegacyID() (string, error)
}

// ContentComparer is a File that can tell, from what it recorded of
// itself, whether it holds the content an index entry records, without
// spelling either content ID out.
type ContentComparer interface {
	SameContent(rec *index.Found) (same, known bool)
}

// StatLaterWalker is a Tree that can walk without a stat per regular file
// (see Entry.Settle).
type StatLaterWalker interface {
	WalkStatLater(dir string, fn func(Entry) error) error
}

// settler is a File walked before its stat.
type settler interface {
	settle() (hostfs.Stat, error)
	release()
}

// reused is a File whose memory is reused once its caller is through
// with it (Release), unless kept (Keep).
type reused interface {
	done()
	keep()
}

// Settle completes an entry a StatLaterWalker's walk gave before its stat:
// its Mode and Size, then. It must come before anything else asks the
// entry or its File of its content, and before the entry is copied on;
// on an entry that has its stat, it does nothing.
func (e *Entry) Settle() error {
	s, ok := e.File.(settler)
	if !ok {
		return nil
	}
	st, err := s.settle()
	if err != nil {
		return err
	}
	e.Mode, e.Size = st.Mode, st.Size
	return nil
}

// Release says the caller is through with an entry of a walk: what it
// holds open until it settles goes, and its File's memory is the walk's
// to reuse. An entry is released once: neither it nor any copy of it may
// be used after, Release included (its File may be another walk's file
// by then), unless Keep came first.
func (e *Entry) Release() {
	switch f := e.File.(type) {
	case reused:
		f.done()
	case settler:
		f.release()
	}
}

// Keep keeps an entry good past its Release, for a caller that holds on
// to it (or a copy) beyond: a change to carry out later.
func (e *Entry) Keep() {
	if f, ok := e.File.(reused); ok {
		f.keep()
	}
}

// ID is the content ID of a regular file.
func (e *Entry) ID() (string, error) {
	if e.File != nil {
		return e.File.ContentID()
	}
	return e.ContentID()
}

// OpenFunc is Open, or the File's; nil when the tree has no faster way.
func (e *Entry) OpenFunc() func() (io.ReadCloser, error) {
	if e.File != nil {
		return e.File.Open
	}
	return e.Open
}

// DigestedFunc is Digested, or the File's; nil when there is none.
func (e *Entry) DigestedFunc() func(string) string {
	if e.File != nil {
		return e.File.Digested
	}
	return e.Digested
}

// LegacyFunc is Legacy, or the File's; nil when there is none.
func (e *Entry) LegacyFunc() func() (string, error) {
	if e.File != nil {
		return e.File.LegacyID
	}
	return e.Legacy
}

// Differ is a tree that tells, from its IDs alone, which entries below dir
// changed since old, another revision of the same source; ok is false when
// it cannot say, or more than limit did.
type Differ interface {
	Changes(old Tree, dir string, limit int) (paths []string, ok bool, err error)
}

// LegacyTree is a tree whose content IDs had another form before content
// IDs were Git blob IDs everywhere (a directory's: "sha256:…").
type LegacyTree interface {
	LegacyID(name string) (string, error)
}

// SameContent reports whether a recorded content ID names the content now
// named id: the same ID, or the ID of the older form (legacy, read only
// then) of the same content.
func SameContent(recorded, id string, legacy func() (string, error)) (bool, error) {
	if recorded == id {
		return true, nil
	}
	if legacy == nil || strings.HasPrefix(recorded, "git:") {
		return false, nil
	}
	old, err := legacy()
	return err == nil && old == recorded, err
}

// validPath is fs.ValidPath without its demand for UTF-8: a file name on
// Linux is any bytes but '/' and NUL, and a tree serves what it holds (a
// Git tree may name a file in Latin-1 as well as a directory can).
func validPath(name string) bool {
	if name == "." {
		return true
	}
	for {
		elem, rest, more := strings.Cut(name, "/")
		if elem == "" || elem == "." || elem == ".." || strings.IndexByte(elem, 0) >= 0 {
			return false
		}
		if !more {
			return true
		}
		name = rest
	}
}
