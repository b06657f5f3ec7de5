package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
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
		t.cacheFile = d.Cache.File("dir-" + hex.EncodeToString(sum[:8]) + ".idx")
		if t.cache, err = state.LoadIndex(t.cacheFile); err != nil {
			t.cache = state.NewIndexAt(t.cacheFile) // a cache is only a cache
		}
	} else {
		t.cache = state.NewIndex()
	}
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
	cache     *state.Index
	cacheFile state.File // the zero File: none
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
	return errors.Join(err, t.root.Close())
}

func (t *dirTree) Walk(dir string, fn func(Entry) error) error {
	d, err := t.root.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return t.walk(d, dir, "", fn)
}

func (t *dirTree) walk(d *hostfs.Dir, top, rel string, fn func(Entry) error) error {
	entries, err := d.ReadDir()
	if err != nil {
		return err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	slices.Sort(names)
	for _, name := range names {
		if name == ".git" && rel == "" {
			continue
		}
		st, err := d.Lstat(name)
		if err != nil {
			return err
		}
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		e := Entry{Path: p, Mode: st.Mode, Size: st.Size}
		switch {
		case st.Mode.IsRegular():
			f := &dirFile{t: t, top: top, rel: p, st: st}
			e.ContentID, e.Digested = f.contentID, f.learn
		case st.Mode&fs.ModeSymlink != 0:
			if e.Target, err = d.Readlink(name); err != nil {
				return err
			}
		}
		if err := fn(e); err != nil {
			return err
		}
		if st.Mode.IsDir() {
			sub, err := d.OpenDir(name)
			if err != nil {
				return err
			}
			err = t.walk(sub, top, p, fn)
			sub.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// dirFile is a walked file: one allocation holds what its entry's
// ContentID and Digested need, a tree of many files being mostly these.
type dirFile struct {
	t        *dirTree
	top, rel string
	st       hostfs.Stat
}

func (f *dirFile) contentID() (string, error) { return f.t.contentID(path.Join(f.top, f.rel), f.st) }
func (f *dirFile) learn(sum string) string    { return f.t.learn(path.Join(f.top, f.rel), f.st, sum) }

func (t *dirTree) ContentID(name string) (string, error) {
	d, err := t.root.OpenDir(path.Dir(name))
	if err != nil {
		return "", err
	}
	defer d.Close()
	base := path.Base(name)
	st, err := d.Lstat(base)
	if err != nil {
		return "", err
	}
	if st.Mode&fs.ModeSymlink != 0 {
		// A symlink inside the repository: name the content it leads to.
		f, err := t.root.OpenFile(name)
		if err != nil {
			return "", err
		}
		defer f.Close()
		return digest(f)
	}
	return t.contentID(name, st)
}

// contentID returns the cached digest while the file's stat has not moved
// (and is not racily new), else hashes the file and caches the result.
func (t *dirTree) contentID(full string, st hostfs.Stat) (string, error) {
	t.mu.Lock()
	e := t.cache.Get(full)
	racy := e != nil && t.cache.Racy(e)
	t.mu.Unlock()
	if e != nil && e.Stat.Same(st) && !racy {
		return e.ContentID, nil
	}
	f, err := t.root.OpenFile(full)
	if err != nil {
		return "", err
	}
	id, err := digest(f)
	f.Close()
	if err != nil {
		return "", err
	}
	t.mu.Lock()
	t.cache.Set(full, &state.IndexEntry{Stat: st, ContentID: id})
	t.cache.Touch(full) // hashed afresh: no longer racy once saved
	t.mu.Unlock()
	return id, nil
}

// learn records the digest of a file read with the stat it had when walked.
// Should the file have changed meanwhile, its stat moved too, and the next
// look-up hashes it afresh.
func (t *dirTree) learn(full string, st hostfs.Stat, sum string) string {
	id := "sha256:" + sum
	t.mu.Lock()
	t.cache.Set(full, &state.IndexEntry{Stat: st, ContentID: id})
	t.mu.Unlock()
	return id
}

// digest is the content ID of a plain directory's file: its SHA-256.
func digest(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// ContentDigest names inline content the way a directory source names a
// file, so the two compare.
func ContentDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
