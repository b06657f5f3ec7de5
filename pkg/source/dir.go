package source

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cortex-sync/cortex-sync/internal/slicepool"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Dir is a plain local directory used as the source.
type Dir struct {
	Dir  string // the repository's directory
	Path string // the manifests' path inside it
	// Cache keeps the stat cache that spares re-hashing unchanged files;
	// the zero Dir disables it.
	Cache state.Dir
}

// Ref records the directory's absolute path.
func (d *Dir) Ref() state.Source {
	abs, _ := filepath.Abs(d.Dir)
	return state.Source{Type: "dir", URL: abs, Path: cleanPath(d.Path)}
}

func cleanPath(p string) string {
	p = path.Clean("/" + p)
	return strings.TrimPrefix(p, "/")
}

// Fetch opens the directory; there is nothing to download.
func (d *Dir) Fetch(ctx context.Context) (*Checkout, error) {
	fi, err := os.Stat(d.Dir)
	if err != nil {
		return nil, fmt.Errorf("source directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("source directory %s is not a directory", d.Dir)
	}
	root, err := hostfs.Open(d.Dir, nil)
	if err != nil {
		return nil, fmt.Errorf("source directory: %w", err)
	}
	t := &dirTree{root: root}
	if d.Cache != (state.Dir{}) {
		sum := sha256.Sum256([]byte(root.Dir()))
		// dir2-: content IDs became Git blob IDs; a cache of the old
		// ones (dir-) is left to rot, never read.
		t.cacheFile = d.Cache.File("dir2-" + hex.EncodeToString(sum[:8]) + ".idx")
		if t.cache, err = index.Load(t.cacheFile); err != nil {
			t.cache = index.NewAt(t.cacheFile) // a cache is only a cache
		}
	} else {
		t.cache = index.New()
	}
	t.racy = t.cache.RacyRule()
	p := cleanPath(d.Path)
	if p == "" {
		p = "."
	}
	if _, err := fs.Stat(t, p); err != nil {
		root.Close()
		return nil, fmt.Errorf("source path %q in %s: %w", d.Path, d.Dir, errors.Unwrap(err))
	}
	return &Checkout{Tree: t, Path: p}, nil
}

// dirTree reads a directory confined under it; a symlink cannot lead out.
type dirTree struct {
	root      *hostfs.Root
	mu        sync.Mutex
	cache     *index.Index
	racy      index.RacyRule // cache's, asked without the lock
	cacheFile state.File     // the zero File: none
	// held are the directories of walks that files not yet settled hold
	// (WalkStatLater).
	held   map[*heldDir]struct{}
	closed bool
}

func (t *dirTree) Open(name string) (fs.File, error) {
	if !validPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	f, err := t.root.OpenFile(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Lstat describes name without following a final symlink (fs.ReadLinkFS).
func (t *dirTree) Lstat(name string) (fs.FileInfo, error) {
	if !validPath(name) {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrInvalid}
	}
	d, err := t.root.OpenDir(path.Dir(name))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	f, err := d.OpenPath(path.Base(name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

// ReadLink returns a symlink's target (fs.ReadLinkFS).
func (t *dirTree) ReadLink(name string) (string, error) {
	d, err := t.root.OpenDir(path.Dir(name))
	if err != nil {
		return "", err
	}
	defer d.Close()
	return d.Readlink(path.Base(name))
}

func (t *dirTree) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var err error
	if t.cache.Dirty() && t.cacheFile != (state.File{}) {
		err = t.cache.Save(t.cacheFile)
	}
	// Directories that files never settled hold (a plan that stopped);
	// a walk still in one closes it as it leaves.
	t.closed = true
	for h := range t.held {
		if !h.walking {
			h.close()
			delete(t.held, h)
		}
	}
	return errors.Join(err, t.root.Close())
}

func (t *dirTree) Walk(dir string, fn func(Entry) error) error {
	return t.walkTop(dir, false, fn)
}

// WalkStatLater is Walk, but a regular file that its directory's listing
// names as one comes before its stat: Mode holds its type alone and Size
// is unknown until Settle. A caller that settles entries on other
// goroutines spares the walk a stat per file.
func (t *dirTree) WalkStatLater(dir string, fn func(Entry) error) error {
	return t.walkTop(dir, true, fn)
}

func (t *dirTree) walkTop(dir string, later bool, fn func(Entry) error) error {
	d, err := t.root.OpenDir(dir)
	if err != nil {
		return err
	}
	t.mu.Lock()
	scan := t.cache.Scan()
	t.mu.Unlock()
	w := &walker{t: t, scan: scan, later: later, top: dir, fn: fn}
	return w.walk(d, "", 0)
}

// walker is one walk of a dirTree.
type walker struct {
	t     *dirTree
	scan  *index.Scan // the stat cache, read as the walk meets its files
	later bool        // regular files' stats are left to Settle
	top   string      // the directory walked
	fn    func(Entry) error
	// levels are a directory's entries at each depth, sorted: needed
	// until the walk leaves it, and used again by the next one there.
	levels [][]walked
}

// walk lists each directory once (getdents64: names and types without a
// stat), stats each entry (but regular files, later: see WalkStatLater),
// and yields them in Git's order, a directory's
// contents right after it: the order of the paths in a tree index. A
// directory's paths, files and stat cache entries are a few allocations,
// whatever the number of its entries.
//
// The walk closes d, unless files walked before their stat (later) hold
// it: then the last of them to settle does.
func (wk *walker) walk(d *hostfs.Dir, rel string, depth int) error {
	t, top := wk.t, wk.top
	var held *heldDir
	if wk.later {
		held = t.hold(d)
		defer held.leave()
	} else {
		defer d.Close()
	}
	listed, err := d.List()
	if err != nil {
		return err
	}
	if len(wk.levels) == depth {
		wk.levels = append(wk.levels, nil)
	}
	entries := slices.Grow(wk.levels[depth][:0], len(listed))
	defer func() { wk.levels[depth] = entries[:0] }()
	for _, e := range listed {
		if e.Name == ".git" && rel == "" {
			continue
		}
		if wk.later && e.TypeKnown && e.Type == 0 {
			// A regular file: stated when settled.
			entries = append(entries, walked{name: e.Name, later: true})
			continue
		}
		st, err := d.Lstat(e.Name)
		if err != nil {
			return err
		}
		entries = append(entries, walked{name: e.Name, st: st})
	}
	slices.SortFunc(entries, func(a, b walked) int {
		return hostfs.ComparePathOrder(a.name, a.st.Mode.IsDir(), b.name, b.st.Mode.IsDir())
	})
	// top/rel/name in one string; the entry's path is the end of it.
	prefix := rel + "/"
	switch {
	case top == "" || top == ".":
		if rel == "" {
			prefix = ""
		}
	case rel != "":
		prefix = top + "/" + rel + "/"
	default:
		prefix = top + "/"
	}
	// The directory's paths in one string, its files in one slice: a
	// walked file costs no allocation of its own.
	var paths strings.Builder
	size, nfiles := 0, 0
	for _, w := range entries {
		size += len(prefix) + len(w.name)
		if w.st.Mode.IsRegular() {
			nfiles++
		}
	}
	paths.Grow(size)
	for _, w := range entries {
		paths.WriteString(prefix)
		paths.WriteString(w.name)
	}
	all := paths.String()
	var files []dirFile
	if nfiles > 0 {
		blk := &fileBlock{files: fileSlices.Get(nfiles)[:nfiles]}
		blk.refs.Store(int32(nfiles))
		files = blk.files
		for i := range files {
			files[i].blk = blk
		}
	}
	for _, w := range entries {
		full := all[:len(prefix)+len(w.name)]
		all = all[len(full):]
		p := full[len(full)-len(w.name)-len(rel)-min(len(rel), 1):]
		st := w.st
		e := Entry{Path: p, Mode: st.Mode, Size: st.Size}
		switch {
		case st.Mode.IsRegular():
			f := &files[0]
			files = files[1:]
			f.t, f.full, f.st = t, full, st
			if w.later {
				f.name, f.held = w.name, held
				held.refs.Add(1)
			}
			// What the stat cache holds for it, found by a scan of the
			// cache in path order.
			t.mu.Lock()
			f.cached = wk.scan.Find(full, &f.prev)
			t.mu.Unlock()
			e.File = f
		case st.Mode&fs.ModeSymlink != 0:
			if e.Target, err = d.Readlink(w.name); err != nil {
				return err
			}
		}
		if err := wk.fn(e); err != nil {
			return err
		}
		if st.Mode.IsDir() {
			sub, err := d.OpenDir(w.name)
			if err != nil {
				return err
			}
			if err := wk.walk(sub, p, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// walked is a listed entry and its stat (none yet, later).
type walked struct {
	name  string
	st    hostfs.Stat
	later bool
}

// dirFile is a walked file, its entry's File: the files of a directory
// are one slice (a fileBlock), a tree of many files being mostly these.
type dirFile struct {
	t    *dirTree
	blk  *fileBlock // nil once released
	full string     // its path in the repository
	st   hostfs.Stat
	// held, until settle, is the directory of a file walked before its
	// stat (named name there).
	held *heldDir
	name string
	// prev is the stat cache's entry when the walk listed it, if cached.
	prev   index.Found
	cached bool

	mu   sync.Mutex
	read *namingReader // the last Open, hashing what it reads
	id   string        // prev's content ID, once spelled out
}

// ContentID is the file's Git blob ID, from the stat cache while the
// file's stat holds.
func (f *dirFile) ContentID() (string, error) {
	if !f.standing() {
		return f.t.contentID(f.full, f.st)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.id == "" {
		f.id = f.prev.ContentID() // spelled out once, when first asked
	}
	return f.id, nil
}

// settle stats a file walked before its stat (a no-op once it has it).
func (f *dirFile) settle() (hostfs.Stat, error) {
	if f.held == nil {
		return f.st, nil
	}
	st, err := f.held.lstat(f.name)
	f.release()
	if err == nil && !st.Mode.IsRegular() {
		err = &fs.PathError{Op: "lstat", Path: f.full, Err: errors.New("no longer a regular file")}
	}
	if err != nil {
		return hostfs.Stat{}, err
	}
	f.st = st
	return st, nil
}

func (f *dirFile) release() {
	if f.held != nil {
		f.held.release()
		f.held = nil
	}
}

// done is Entry.Release: the caller is through with the file; the last
// of its directory's files to go gives their slice back. A second
// release before then counts once (after, the slot may hold another
// walk's file: Release is once only).
func (f *dirFile) done() {
	if b := f.blk; b != nil {
		f.blk = nil
		f.release()
		b.drop()
	}
}

// keep is Entry.Keep: the file's directory's slice is never reused.
func (f *dirFile) keep() { f.blk.refs.Add(1) }

// fileSlices are the directories' files: a walk of many directories
// reuses the slices of those its caller is through with (Entry.Release)
// rather than allocating the tree's files over again (3 MB of 10 at
// 11,478 files).
var fileSlices = slicepool.Pool[dirFile]{Smallest: 8}

// fileBlock is a directory's files, given back to fileSlices once each
// was released and none kept.
type fileBlock struct {
	files []dirFile
	refs  atomic.Int32 // the files not released, and one for each kept
}

func (b *fileBlock) drop() {
	if b.refs.Add(-1) == 0 {
		fileSlices.Put(b.files)
		b.files = nil
	}
}

// heldDir is a directory of a walk that its files walked before their
// stat still need: closed once the walk has left it and each has settled,
// or else when the tree closes.
type heldDir struct {
	t       *dirTree
	refs    atomic.Int32 // the walk's, while walking, and each file's
	walking bool         // guarded by t.mu
	// mu guards d against a Close of the tree while a file settles: the
	// descriptor, once closed, may name another file.
	mu sync.Mutex
	d  *hostfs.Dir // nil once closed
}

// lstat stats name in the directory, unless the tree closed it.
func (h *heldDir) lstat(name string) (hostfs.Stat, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.d == nil {
		return hostfs.Stat{}, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrClosed}
	}
	return h.d.Lstat(name)
}

// close closes the directory, once.
func (h *heldDir) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.d != nil {
		h.d.Close()
		h.d = nil
	}
}

// hold holds d for the walk.
func (t *dirTree) hold(d *hostfs.Dir) *heldDir {
	h := &heldDir{t: t, d: d, walking: true}
	h.refs.Store(1)
	t.mu.Lock()
	if t.held == nil {
		t.held = map[*heldDir]struct{}{}
	}
	t.held[h] = struct{}{}
	t.mu.Unlock()
	return h
}

// leave is the walk's release, once it has left the directory: the tree
// closed meanwhile, the directory goes at once.
func (h *heldDir) leave() {
	h.t.mu.Lock()
	h.walking = false
	closed := h.t.closed
	if closed {
		delete(h.t.held, h)
	}
	h.t.mu.Unlock()
	if closed {
		h.close()
		return
	}
	h.release()
}

func (h *heldDir) release() {
	if h.refs.Add(-1) != 0 {
		return
	}
	h.t.mu.Lock()
	delete(h.t.held, h)
	h.t.mu.Unlock()
	h.close()
}

// SameContent reports whether the file holds the content rec records,
// as the stat cache knows it without reading the file or spelling either
// ID out; known is false when only ContentID can tell.
func (f *dirFile) SameContent(rec *index.Found) (same, known bool) {
	if !f.standing() {
		return false, false
	}
	return f.prev.SameContent(rec)
}

// standing reports whether the stat cache's entry the walk found names
// the file's content (trusted).
func (f *dirFile) standing() bool {
	return f.cached && f.t.trusted(f.prev.Stat(), f.prev.HasSHA256(), f.st)
}

// LegacyID names the content as before content IDs were Git blob IDs.
func (f *dirFile) LegacyID() (string, error) { return f.t.legacyID(f.full, f.st) }

// Open reads the file, naming its content as it goes: a copy of it then
// learns its ID without a second read (Digested).
func (f *dirFile) Open() (io.ReadCloser, error) {
	file, err := f.t.root.OpenFile(f.full)
	if err != nil {
		return nil, err
	}
	r := newNamingReader(file, f.st.Size)
	f.mu.Lock()
	f.read = r
	f.mu.Unlock()
	return r, nil
}

// Digested records the content ID of a file its caller copied whole
// through Open, with the SHA-256 it took of what it read. Should the file have
// changed meanwhile, its stat moved too, and the next look-up hashes it
// afresh; one not read whole through open is hashed now.
func (f *dirFile) Digested(sum string) string {
	f.mu.Lock()
	r := f.read
	f.mu.Unlock()
	id, ok := r.id()
	if !ok {
		id, _ = f.ContentID()
		return id
	}
	f.t.mu.Lock()
	f.t.cache.Set(f.full, &index.Entry{Stat: f.st, ContentID: id, SHA256: sum})
	f.t.mu.Unlock()
	return id
}

func (t *dirTree) ContentID(name string) (string, error) {
	st, full, err := t.statContent(name)
	if err != nil || st == nil {
		return full, err
	}
	return t.contentID(full, *st)
}

// LegacyID names the content at name as cortex-sync named a directory's
// content before content IDs were Git blob IDs everywhere ("sha256:…"),
// so what was recorded then still compares.
func (t *dirTree) LegacyID(name string) (string, error) {
	st, full, err := t.statContent(name)
	if err != nil {
		return "", err
	}
	if st == nil {
		f, err := t.root.OpenFile(name)
		if err != nil {
			return "", err
		}
		defer f.Close()
		_, sum, err := digest(f, -1)
		return "sha256:" + sum, err
	}
	return t.legacyID(full, *st)
}

// statContent is the stat of the regular file at name; for a symlink
// inside the repository it is nil and full is the ID of the content it
// leads to.
func (t *dirTree) statContent(name string) (*hostfs.Stat, string, error) {
	d, err := t.root.OpenDir(path.Dir(name))
	if err != nil {
		return nil, "", err
	}
	defer d.Close()
	st, err := d.Lstat(path.Base(name))
	if err != nil {
		return nil, "", err
	}
	if st.Mode&fs.ModeSymlink != 0 {
		// A symlink inside the repository: name the content it leads to.
		f, err := t.root.OpenFile(name)
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		id, _, err := digest(f, -1)
		return nil, id, err
	}
	return &st, name, nil
}

// contentID returns the cached ID while the file's stat has not moved (and
// is not racily new), else hashes the file and caches the result.
func (t *dirTree) contentID(full string, st hostfs.Stat) (string, error) {
	e, err := t.cached(full, st)
	if err != nil {
		return "", err
	}
	return e.ContentID, nil
}

func (t *dirTree) legacyID(full string, st hostfs.Stat) (string, error) {
	e, err := t.cached(full, st)
	if err != nil {
		return "", err
	}
	return "sha256:" + e.SHA256, nil
}

// stands is e when it names the content of a file with stat st (trusted).
func (t *dirTree) stands(e *index.Entry, st hostfs.Stat) *index.Entry {
	if e == nil || !t.trusted(e.Stat, e.SHA256 != "", st) {
		return nil
	}
	return e
}

// trusted reports whether a stat cache entry recorded with stat rec names
// the content of a file with stat st: the stat has not moved, it is not
// racily clean, and the entry holds both IDs (hasSHA: its SHA-256 too).
func (t *dirTree) trusted(rec hostfs.Stat, hasSHA bool, st hostfs.Stat) bool {
	return hasSHA && rec.Same(st) && !t.racy.Racy(rec)
}

// cached is the cache's entry for a file with stat st: its Git blob ID
// and SHA-256, hashed afresh when the stat moved.
func (t *dirTree) cached(full string, st hostfs.Stat) (*index.Entry, error) {
	t.mu.Lock()
	e := t.cache.Get(full)
	t.mu.Unlock()
	if e := t.stands(e, st); e != nil {
		return e, nil
	}
	f, err := t.root.OpenFile(full)
	if err != nil {
		return nil, err
	}
	id, sum, err := digest(f, st.Size)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", full, err)
	}
	e = &index.Entry{Stat: st, ContentID: id, SHA256: sum}
	t.mu.Lock()
	t.cache.Set(full, e)
	t.cache.Touch(full) // hashed afresh: no longer racy once saved
	t.mu.Unlock()
	return e, nil
}

// errChangedWhileRead: a file's size moved while it was hashed.
var errChangedWhileRead = errors.New("changed while it was read; try again")

// digest names r's content by its Git blob ID, and takes its SHA-256 (hex)
// in the same read. size, when known (not -1), is what a stat said: a file
// that turns out to hold more or less changed while read.
func digest(r io.Reader, size int64) (id, sum string, err error) {
	if size < 0 {
		b, err := io.ReadAll(r)
		if err != nil {
			return "", "", err
		}
		s := sha256.Sum256(b)
		return ContentDigest(b), hex.EncodeToString(s[:]), nil
	}
	br := newNamingReader(r, size)
	if _, err := io.Copy(io.Discard, br); err != nil {
		return "", "", err
	}
	id, ok := br.id()
	if !ok {
		return "", "", errChangedWhileRead
	}
	return id, hex.EncodeToString(br.sha.Sum(nil)), nil
}

// namingReader reads a file of a known size and names its content as Git
// names a blob (SHA-1 of "blob <size>\0" and the bytes), taking its
// SHA-256 too.
type namingReader struct {
	r        io.Reader
	size, n  int64
	git, sha hash.Hash
	eof      bool
}

func newNamingReader(r io.Reader, size int64) *namingReader {
	b := &namingReader{r: r, size: size, git: sha1.New(), sha: sha256.New()}
	fmt.Fprintf(b.git, "blob %d\x00", size)
	return b
}

func (b *namingReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.git.Write(p[:n])
	b.sha.Write(p[:n])
	b.n += int64(n)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *namingReader) Close() error {
	if c, ok := b.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// id is the content's ID, once all of it was read and it held the size
// it was said to.
func (b *namingReader) id() (string, bool) {
	if b == nil || !b.eof || b.n != b.size {
		return "", false
	}
	return "git:" + hex.EncodeToString(b.git.Sum(nil)), true
}

// ContentDigest names content as a Git tree names a blob ("git:" and its
// SHA-1 blob ID): inline content, a directory's file and a Git blob of the
// same bytes have the same ID.
func ContentDigest(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return "git:" + hex.EncodeToString(h.Sum(nil))
}

// LegacyDigest names inline content as cortex-sync did before content IDs
// were Git blob IDs everywhere, so a record of then still compares.
func LegacyDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
