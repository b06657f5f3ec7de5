package source

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// gitTree is a commit's tree read straight from the object store: no
// checkout, and blob IDs serve as content IDs. Blobs are read from the
// packs by any number of goroutines; go-git's storage is not safe for
// concurrent readers, so what goes through it (trees, loose objects) is
// serialised.
type gitTree struct {
	mu     sync.Mutex
	s      storer.EncodedObjectStorer
	root   plumbing.Hash
	packs  *packSet // nil: every object through s
	closed sync.Once
}

// newGitTree is the tree root of the cache's storage s. Its objects are
// read from packs, which it holds open: the tree reads what it read when
// it was made for as long as it is open, even once the cache was rebuilt
// under it (the revision the host is on stays readable until the next
// one is applied). Only what the packs lack goes to s.
func newGitTree(s storer.EncodedObjectStorer, root plumbing.Hash, packs *packSet) (*gitTree, error) {
	t := &gitTree{s: s, packs: packs.acquire()}
	if t.packs != nil {
		t.s = &packStorer{EncodedObjectStorer: s, packs: t.packs}
	}
	t.root = root
	raw, err := t.readTree(root)
	if err != nil {
		t.Close()
		return nil, err
	}
	raw.release()
	return t, nil
}

// rawTree is a tree object's content as stored: entries read in place,
// nothing kept once released. A path lookup reads the trees on its way
// and keeps none (go-git's Tree.FindEntry caches every subtree it passes
// in the root, which grows to the whole repository in an agent).
type rawTree struct {
	b      []byte
	pooled bool
}

func (r rawTree) release() {
	if r.pooled {
		putBuf(r.b)
	}
}

// readTree reads the tree object h.
func (t *gitTree) readTree(h plumbing.Hash) (rawTree, error) {
	if t.packs != nil {
		typ, data, err := t.packs.read(h)
		switch {
		case err == nil && typ != plumbing.TreeObject:
			putBuf(data)
			return rawTree{}, fmt.Errorf("object %s: a %s, not a tree", h, typ)
		case err == nil:
			return rawTree{b: data, pooled: true}, nil
		case !errors.Is(err, errNotPacked):
			return rawTree{}, err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	obj, err := t.s.EncodedObject(plumbing.TreeObject, h)
	if err != nil {
		return rawTree{}, err
	}
	r, err := obj.Reader()
	if err != nil {
		return rawTree{}, err
	}
	defer r.Close()
	b, err := readAllSized(r, obj.Size())
	return rawTree{b: b}, err
}

// next parses the entry at the start of b: its mode, name (a view of b)
// and ID, and what follows it.
func nextEntry(b []byte) (mode filemode.FileMode, name []byte, id plumbing.Hash, rest []byte, err error) {
	sp := bytes.IndexByte(b, ' ')
	nul := bytes.IndexByte(b, 0)
	if sp <= 0 || nul < sp+2 || len(b) < nul+1+20 {
		return 0, nil, id, nil, errors.New("a malformed tree entry")
	}
	for _, c := range b[:sp] {
		if c < '0' || c > '7' {
			return 0, nil, id, nil, fmt.Errorf("a tree entry of mode %q", b[:sp])
		}
		mode = mode<<3 | filemode.FileMode(c-'0')
	}
	copy(id[:], b[nul+1:nul+21])
	return mode, b[sp+1 : nul], id, b[nul+21:], nil
}

// entries lists a tree's entries.
func (r rawTree) entries(h plumbing.Hash) ([]object.TreeEntry, error) {
	var out []object.TreeEntry
	for b := r.b; len(b) > 0; {
		mode, name, id, rest, err := nextEntry(b)
		if err != nil {
			return nil, fmt.Errorf("tree %s: %w", h, err)
		}
		out = append(out, object.TreeEntry{Name: string(name), Mode: mode, Hash: id})
		b = rest
	}
	return out, nil
}

// find looks name up among a tree's entries.
func (r rawTree) find(h plumbing.Hash, name string) (object.TreeEntry, bool, error) {
	for b := r.b; len(b) > 0; {
		mode, n, id, rest, err := nextEntry(b)
		if err != nil {
			return object.TreeEntry{}, false, fmt.Errorf("tree %s: %w", h, err)
		}
		if string(n) == name {
			return object.TreeEntry{Name: name, Mode: mode, Hash: id}, true, nil
		}
		b = rest
	}
	return object.TreeEntry{}, false, nil
}

// openBlob streams a blob by ID, and says its size: from the packs, a
// large one never held whole; else through go-git.
func (t *gitTree) openBlob(h plumbing.Hash) (io.ReadCloser, int64, error) {
	if t.packs != nil {
		typ, size, rc, err := t.packs.open(h)
		switch {
		case err == nil && typ != plumbing.BlobObject:
			rc.Close()
			return nil, 0, fmt.Errorf("object %s: a %s, not a blob", h, typ)
		case err == nil:
			return rc, size, nil
		case !errors.Is(err, errNotPacked):
			return nil, 0, err
		}
	}
	data, err := t.blob(h)
	if err != nil {
		return nil, 0, err
	}
	return newBlobReader(data), int64(len(data)), nil
}

// maxLink bounds a symlink's target as read from a tree: a blob of a
// gigabyte named as a symlink is not read.
const maxLink = 64 << 10

// link reads a symlink's target.
func (t *gitTree) link(h plumbing.Hash) (string, error) {
	if n, err := t.size(h); err == nil && n > maxLink {
		return "", fmt.Errorf("object %s: a symlink target of %d bytes", h, n)
	}
	b, err := t.blob(h)
	return string(b), err
}

// size is a blob's size from its header, without reading it.
func (t *gitTree) size(h plumbing.Hash) (int64, error) {
	if t.packs != nil {
		n, err := t.packs.size(h)
		if !errors.Is(err, errNotPacked) {
			return n, err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.s.EncodedObjectSize(h)
}

func (t *gitTree) Close() error {
	t.closed.Do(t.packs.release)
	return nil
}

func gitMode(m filemode.FileMode) fs.FileMode {
	switch m {
	case filemode.Dir:
		return fs.ModeDir | 0o755
	case filemode.Executable:
		return 0o755
	case filemode.Symlink:
		return fs.ModeSymlink | 0o777
	case filemode.Regular, filemode.Deprecated:
		return 0o644
	}
	return fs.ModeIrregular // submodules
}

// entry finds name in the tree; "." is the root. It reads the trees on
// the path, one at a time.
func (t *gitTree) entry(op, name string) (*object.TreeEntry, error) {
	if !validPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	e := object.TreeEntry{Name: ".", Mode: filemode.Dir, Hash: t.root}
	if name == "." {
		return &e, nil
	}
	for rest := name; rest != ""; {
		part, after, _ := strings.Cut(rest, "/")
		if e.Mode != filemode.Dir {
			return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		raw, err := t.readTree(e.Hash)
		if err != nil {
			return nil, &fs.PathError{Op: op, Path: name, Err: err}
		}
		next, ok, err := raw.find(e.Hash, part)
		raw.release()
		if err != nil {
			return nil, &fs.PathError{Op: op, Path: name, Err: err}
		}
		if !ok {
			return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		e, rest = next, after
	}
	return &e, nil
}

func (t *gitTree) Open(name string) (fs.File, error) {
	e, err := t.entry("open", name)
	if err != nil {
		return nil, err
	}
	switch e.Mode {
	case filemode.Dir:
		raw, err := t.readTree(e.Hash)
		var entries []object.TreeEntry
		if err == nil {
			entries, err = raw.entries(e.Hash)
			raw.release()
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return &gitDir{info: gitInfo{name: path.Base(name), mode: gitMode(e.Mode)}, entries: entries}, nil
	case filemode.Symlink, filemode.Submodule:
		// Symlinks are not followed inside a Git tree: a manifest source must
		// be a plain file (mirrors copy symlinks as symlinks).
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	rc, size, err := t.openBlob(e.Hash)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &gitFile{info: gitInfo{name: path.Base(name), mode: gitMode(e.Mode), size: size}, r: rc}, nil
}

// blob reads a blob whole: from the packs, else through go-git; for
// small blobs only (a symlink's target), as a large one would be held
// whole. The caller owns the bytes (a blobReader may hand them back).
func (t *gitTree) blob(h plumbing.Hash) ([]byte, error) {
	if t.packs != nil {
		typ, data, err := t.packs.read(h)
		switch {
		case err == nil && typ != plumbing.BlobObject:
			return nil, fmt.Errorf("object %s: a %s, not a blob", h, typ)
		case err == nil:
			return data, nil
		case !errors.Is(err, errNotPacked):
			return nil, err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b, err := object.GetBlob(t.s, h)
	if err != nil {
		return nil, err
	}
	r, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return readAllSized(r, b.Size)
}

// Lstat describes name without following a symlink (fs.ReadLinkFS).
func (t *gitTree) Lstat(name string) (fs.FileInfo, error) {
	e, err := t.entry("lstat", name)
	if err != nil {
		return nil, err
	}
	info := gitInfo{name: path.Base(name), mode: gitMode(e.Mode)}
	// The blob's size from its header, without inflating it: manifest
	// loading refuses a file over its limit before reading it.
	if info.mode.IsRegular() {
		if n, err := t.size(e.Hash); err == nil {
			info.size = n
		}
	}
	return info, nil
}

// ReadLink returns a symlink's target (fs.ReadLinkFS).
func (t *gitTree) ReadLink(name string) (string, error) {
	e, err := t.entry("readlink", name)
	if err != nil {
		return "", err
	}
	if e.Mode != filemode.Symlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return t.link(e.Hash)
}

func (t *gitTree) ContentID(name string) (string, error) {
	e, err := t.entry("stat", name)
	if err != nil {
		return "", err
	}
	return "git:" + e.Hash.String(), nil
}

func (t *gitTree) Walk(dir string, fn func(Entry) error) error {
	e, err := t.entry("walk", dir)
	if err != nil {
		return err
	}
	return t.walk(e.Hash, "", fn)
}

// walk streams the tree h, depth first: what it holds at any time is the
// trees on the path to the entry it is at.
func (t *gitTree) walk(h plumbing.Hash, rel string, fn func(Entry) error) error {
	raw, err := t.readTree(h)
	if err != nil {
		return err
	}
	defer raw.release()
	for b := raw.b; len(b) > 0; {
		m, name, id, rest, err := nextEntry(b)
		if err != nil {
			return fmt.Errorf("tree %s: %w", h, err)
		}
		b = rest
		p := string(name)
		if rel != "" {
			p = rel + "/" + p
		}
		mode := gitMode(m)
		if mode == fs.ModeIrregular {
			continue // a submodule: nothing to mirror
		}
		cid := "git:" + id.String()
		entry := Entry{Path: p, Mode: mode, ContentID: func() (string, error) { return cid, nil }}
		if mode.IsRegular() {
			entry.Open = func() (io.ReadCloser, error) {
				rc, _, err := t.openBlob(id)
				return rc, err
			}
		}
		if m == filemode.Symlink {
			target, err := t.link(id)
			if err != nil {
				return err
			}
			entry.Target = target
		}
		if err := fn(entry); err != nil {
			return err
		}
		if m == filemode.Dir {
			if err := t.walk(id, p, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// gitInfo is an fs.FileInfo of a tree entry.
type gitInfo struct {
	name string
	mode fs.FileMode
	size int64
}

func (i gitInfo) Name() string               { return i.name }
func (i gitInfo) Size() int64                { return i.size }
func (i gitInfo) Mode() fs.FileMode          { return i.mode }
func (i gitInfo) ModTime() time.Time         { return time.Time{} }
func (i gitInfo) IsDir() bool                { return i.mode.IsDir() }
func (i gitInfo) Sys() any                   { return nil }
func (i gitInfo) Type() fs.FileMode          { return i.mode.Type() }
func (i gitInfo) Info() (fs.FileInfo, error) { return i, nil }

// gitFile is a blob being read: streamed, when large.
type gitFile struct {
	info gitInfo
	r    io.ReadCloser
}

func (f *gitFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *gitFile) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *gitFile) Close() error               { return f.r.Close() }

type gitDir struct {
	info    gitInfo
	entries []object.TreeEntry
	off     int
}

func (d *gitDir) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *gitDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.name, Err: fs.ErrInvalid}
}
func (d *gitDir) Close() error { return nil }

// ReadDir lists entries in lexical order, as fs.ReadDirFile asks.
func (d *gitDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if d.off == 0 {
		sort.Slice(d.entries, func(i, j int) bool { return d.entries[i].Name < d.entries[j].Name })
	}
	rest := d.entries[d.off:]
	if n > 0 && len(rest) > n {
		rest = rest[:n]
	}
	if n > 0 && len(rest) == 0 {
		return nil, io.EOF
	}
	out := make([]fs.DirEntry, 0, len(rest))
	for _, e := range rest {
		mode := gitMode(e.Mode)
		if mode == fs.ModeIrregular {
			continue
		}
		out = append(out, gitInfo{name: e.Name, mode: mode})
	}
	d.off += len(rest)
	return out, nil
}

// Changes lists the entries below dir that differ between old, another
// revision of the same repository, and t: a path for each file or symlink
// added, removed or changed, and one for a directory added or removed
// whole. Subtrees with the same ID are pruned unread, so a one-file commit
// reads the trees on its path alone. ok is false when old is no Git tree,
// dir is no directory in both, or more than limit entries changed: then
// everything is to be looked at.
func (t *gitTree) Changes(old Tree, dir string, limit int) (paths []string, ok bool, err error) {
	o, isGit := old.(*gitTree)
	if !isGit {
		return nil, false, nil
	}
	a, err := o.subtree(dir)
	if err != nil {
		return nil, false, nil
	}
	b, err := t.subtree(dir)
	if err != nil {
		return nil, false, nil
	}
	var diff func(a, b *object.Tree, rel string) bool
	diff = func(a, b *object.Tree, rel string) bool {
		seen := make(map[string]bool, len(b.Entries))
		was := make(map[string]object.TreeEntry, len(a.Entries))
		for _, e := range a.Entries {
			was[e.Name] = e
		}
		for _, e := range b.Entries {
			seen[e.Name] = true
			p := path.Join(rel, e.Name)
			prev, had := was[e.Name]
			switch {
			case had && prev.Hash == e.Hash && prev.Mode == e.Mode:
				continue
			case had && prev.Mode == filemode.Dir && e.Mode == filemode.Dir:
				sa, err1 := o.tree(prev.Hash)
				sb, err2 := t.tree(e.Hash)
				if err1 != nil || err2 != nil {
					err = errors.Join(err1, err2)
					return false
				}
				if !diff(sa, sb, p) {
					return false
				}
				continue
			}
			if paths = append(paths, p); len(paths) > limit {
				return false
			}
		}
		for _, e := range a.Entries {
			if !seen[e.Name] {
				if paths = append(paths, path.Join(rel, e.Name)); len(paths) > limit {
					return false
				}
			}
		}
		return true
	}
	if !diff(a, b, "") || err != nil {
		return nil, false, err
	}
	return paths, true, nil
}

// subtree is the tree at dir ("." the root).
func (t *gitTree) subtree(dir string) (*object.Tree, error) {
	e, err := t.entry("walk", dir)
	if err != nil {
		return nil, err
	}
	if e.Mode != filemode.Dir {
		return nil, &fs.PathError{Op: "walk", Path: dir, Err: fs.ErrInvalid}
	}
	return t.tree(e.Hash)
}

// tree reads the tree object h.
func (t *gitTree) tree(h plumbing.Hash) (*object.Tree, error) {
	raw, err := t.readTree(h)
	if err != nil {
		return nil, err
	}
	defer raw.release()
	entries, err := raw.entries(h)
	if err != nil {
		return nil, err
	}
	return &object.Tree{Hash: h, Entries: entries}, nil
}
