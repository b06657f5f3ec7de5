package source

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/go-git/go-billy/v5"
	"golang.org/x/sys/unix"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// cacheFS is go-git's view of the Git cache: a billy.Filesystem whose every
// name resolves through state.Dir, beneath the cache and never through a
// symlink, as every other write into the state dir does. go-git's own osfs
// would follow a symlink found there.
type cacheFS struct{ dir state.Dir }

var _ billy.Filesystem = cacheFS{}

// rel is name as a path below the cache: go-git joins its names with the
// OS separator, and never starts one at "/".
func rel(name string) string {
	p := path.Clean("/" + strings.ReplaceAll(name, string(os.PathSeparator), "/"))
	return strings.TrimPrefix(p, "/")
}

func (c cacheFS) Create(name string) (billy.File, error) {
	return c.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
}

func (c cacheFS) Open(name string) (billy.File, error) { return c.OpenFile(name, os.O_RDONLY, 0) }

// goGitIndexReads counts the pack indexes go-git opened (it does so to
// load one whole into the heap): a test checks none is.
var goGitIndexReads atomic.Int64

func (c cacheFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	if strings.HasSuffix(name, ".idx") && flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		goGitIndexReads.Add(1)
	}
	f, err := c.dir.OpenFile(rel(name), flag, perm&0o700|0o600)
	if err != nil {
		return nil, err
	}
	return &cacheFile{File: f, name: name}, nil
}

// Stat is Lstat: the cache holds no symlink to follow.
func (c cacheFS) Stat(name string) (os.FileInfo, error) { return c.Lstat(name) }

func (c cacheFS) Lstat(name string) (os.FileInfo, error) {
	dir, base := path.Split(rel(name))
	if base == "" {
		base = "."
	}
	h, err := c.dir.Sub(dir).Open(false)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return lstat(h, base)
}

// lstat describes name in h, never what a symlink names.
func lstat(h *hostfs.Dir, name string) (os.FileInfo, error) {
	f, err := h.OpenPath(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return namedInfo{fi, path.Base(name)}, nil
}

// namedInfo is a FileInfo under the name it was asked by.
type namedInfo struct {
	os.FileInfo
	name string
}

func (i namedInfo) Name() string { return i.name }

func (c cacheFS) Rename(from, to string) error { return c.dir.Rename(rel(from), rel(to)) }

func (c cacheFS) Remove(name string) error {
	r := rel(name)
	if _, err := c.Lstat(r); err != nil {
		return err // go-git expects a missing file to be an error
	}
	return c.dir.Remove(r)
}

func (c cacheFS) Join(elem ...string) string { return path.Join(elem...) }

func (c cacheFS) TempFile(dir, prefix string) (billy.File, error) {
	d := c.dir.Sub(rel(dir))
	h, err := d.Open(true)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	f, tmp, err := h.CreateTemp(prefix)
	if err != nil {
		return nil, err
	}
	return &cacheFile{File: f, name: path.Join(rel(dir), tmp)}, nil
}

func (c cacheFS) ReadDir(name string) ([]os.FileInfo, error) {
	d := c.dir.Sub(rel(name))
	h, err := d.Open(false)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	entries, err := h.ReadDir()
	if err != nil {
		return nil, err
	}
	infos := make([]os.FileInfo, 0, len(entries))
	for _, e := range entries {
		if fi, err := lstat(h, e.Name()); err == nil {
			infos = append(infos, fi)
		}
	}
	slices.SortFunc(infos, func(a, b os.FileInfo) int { return strings.Compare(a.Name(), b.Name()) })
	return infos, nil
}

func (c cacheFS) MkdirAll(name string, _ os.FileMode) error {
	h, err := c.dir.Sub(rel(name)).Open(true)
	if err != nil {
		return err
	}
	return h.Close()
}

// Symlink is refused: nothing in the cache is a symlink.
func (c cacheFS) Symlink(_, link string) error {
	return &fs.PathError{Op: "symlink", Path: link, Err: errors.ErrUnsupported}
}

func (c cacheFS) Readlink(link string) (string, error) {
	return "", &fs.PathError{Op: "readlink", Path: link, Err: fs.ErrInvalid}
}

func (c cacheFS) Chroot(p string) (billy.Filesystem, error) {
	return cacheFS{dir: c.dir.Sub(rel(p))}, nil
}

func (c cacheFS) Root() string { return c.dir.Path() }

// cacheFile is an open file of the cache, named as go-git asked for it.
type cacheFile struct {
	*os.File
	name string
}

func (f *cacheFile) Name() string { return f.name }

func (f *cacheFile) Lock() error { return flock(f.File, unix.LOCK_EX) }

func (f *cacheFile) Unlock() error { return flock(f.File, unix.LOCK_UN) }

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}
