package state

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// ErrSymlink reports a symlink met in the state dir, below its own path:
// cortex-sync never follows one there.
var ErrSymlink = errors.New("a symlink in the state dir, which cortex-sync never follows")

// Dir is a state directory, or a directory in one, and the only door to
// it. The state dir's own path is the administrator's and is resolved as
// given (its symlinks followed, as --root's are); below it every name
// resolves beneath it and no symlink is ever followed (openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or a walk a component at a time,
// through hostfs). So nothing that lands in it — a backed-up symlink above
// all — can lead a later read or write out of it. Each call opens the
// state dir afresh: one removed under a running agent is made again by the
// next write.
type Dir struct {
	top string // the state dir, absolute
	rel string // this directory below top, slash-separated; "" is top
}

// At is the state dir at p.
func At(p string) Dir {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return Dir{top: p}
}

// Path is the directory's host path, for messages and for what must
// name it (a watch, a supervisor's command line).
func (d Dir) Path() string { return filepath.Join(d.top, filepath.FromSlash(d.rel)) }

func (d Dir) String() string { return d.Path() }

// Sub is the directory name (slash-separated) below d.
func (d Dir) Sub(name string) Dir { return Dir{top: d.top, rel: path.Join(d.rel, name)} }

// IsZero reports the zero Dir (or a Sub of it): nowhere.
func (d Dir) IsZero() bool { return d.top == "" }

// Open opens the directory as a hostfs.Dir, whose methods never follow a
// symlink; with create, it and what is missing above it are made (0700).
// The caller closes it.
func (d Dir) Open(create bool) (*hostfs.Dir, error) {
	if d.IsZero() {
		return nil, errors.New("no state dir")
	}
	top, err := hostfs.OpenOwned(d.top)
	if err != nil && create && errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(d.top, 0o700); err != nil {
			return nil, err
		}
		top, err = hostfs.OpenOwned(d.top)
	}
	if err != nil || d.rel == "" {
		return top, err
	}
	defer top.Close()
	var sub *hostfs.Dir
	if create {
		sub, err = top.MkdirAllRel(d.rel, 0o700)
	} else {
		sub, err = top.OpenDirRel(d.rel)
	}
	return sub, refuseLinks(err)
}

// refuseLinks makes a symlink met on the way an error that says so
// (wrapping ErrSymlink) and what to do.
func refuseLinks(err error) error {
	if err != nil && (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV)) {
		return fmt.Errorf("%w: %w; move it away", err, ErrSymlink)
	}
	return err
}

// parent opens the directory that holds name (slash-separated, below d)
// and returns it with name's last element.
func (d Dir) parent(name string, create bool) (*hostfs.Dir, string, error) {
	dir, base := path.Split(path.Clean(name))
	if base == "" || base == "." || base == ".." || strings.HasPrefix(name, "/") {
		return nil, "", fmt.Errorf("%q is not a name in the state dir", name)
	}
	if dir != "" {
		d = d.Sub(dir)
	}
	h, err := d.Open(create)
	if err != nil {
		return nil, "", err
	}
	return h, base, nil
}

// ReadFile reads the file name.
func (d Dir) ReadFile(name string) ([]byte, error) {
	f, err := d.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(f)
}

// readAll reads f whole: its real size, never a count inside it, bounds
// what is allocated up front.
func readAll(f *os.File) ([]byte, error) {
	var buf bytes.Buffer
	if fi, err := f.Stat(); err == nil {
		buf.Grow(int(min(max(fi.Size(), 0), 64<<20)) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(f)
	return buf.Bytes(), err
}

// OpenFile opens the file name (flag as os.OpenFile's); with os.O_CREATE
// the directories above it are made too.
func (d Dir) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	h, base, err := d.parent(name, flag&os.O_CREATE != 0)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	f, err := h.OpenFile(base, flag, perm)
	return f, refuseLinks(err)
}

// Lstat describes name without following it.
func (d Dir) Lstat(name string) (hostfs.Stat, error) {
	h, base, err := d.parent(name, false)
	if err != nil {
		return hostfs.Stat{}, err
	}
	defer h.Close()
	return h.Lstat(base)
}

// ReadDir lists the directory, sorted by name.
func (d Dir) ReadDir() ([]fs.DirEntry, error) {
	h, err := d.Open(false)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	entries, err := h.ReadDir()
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

// existing is parent without create: nil, and no error, when the
// directory that would hold name is missing.
func (d Dir) existing(name string) (*hostfs.Dir, string, error) {
	h, base, err := d.parent(name, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	return h, base, err
}

// Remove deletes the file, symlink or empty directory name; a missing one
// is not an error.
func (d Dir) Remove(name string) error {
	h, base, err := d.existing(name)
	if h == nil {
		return err
	}
	defer h.Close()
	return h.Remove(base)
}

// RemoveAll deletes name and everything below it, following no symlink.
func (d Dir) RemoveAll(name string) error {
	h, base, err := d.existing(name)
	if h == nil {
		return err
	}
	defer h.Close()
	return h.RemoveAll(base)
}

// Rename moves from over to, both below d, atomically.
func (d Dir) Rename(from, to string) error {
	src, old, err := d.parent(from, false)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, name, err := d.parent(to, true)
	if err != nil {
		return err
	}
	defer dst.Close()
	return src.RenameTo(old, dst, name)
}

// WriteFile writes data to name atomically and durably (temp, fsync,
// rename, fsync dir), 0600 in 0700 directories.
func (d Dir) WriteFile(name string, data []byte) error {
	return d.WriteFunc(name, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// WriteFunc is WriteFile with the content written by write.
func (d Dir) WriteFunc(name string, write func(*os.File) error) error {
	h, base, err := d.parent(name, true)
	if err != nil {
		return err
	}
	defer h.Close()
	f, tmp, err := h.CreateTemp(base)
	if err != nil {
		return err
	}
	defer h.Remove(tmp) // gone already once renamed
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := syncClose(f); err != nil {
		return err
	}
	if err := h.Rename(tmp, base); err != nil {
		return err
	}
	return h.Sync()
}

// Sync makes the directory's entries durable.
func (d Dir) Sync() error {
	h, err := d.Open(false)
	if err != nil {
		return err
	}
	defer h.Close()
	return h.Sync()
}

// File is a file in a state dir (an index, a cache).
type File struct {
	dir  Dir
	name string // one path element
}

// File is the file name (slash-separated) below d.
func (d Dir) File(name string) File {
	dir, base := path.Split(path.Clean(name))
	if dir != "" {
		d = d.Sub(dir)
	}
	return File{dir: d, name: base}
}

// Path is the file's host path, for messages.
func (f File) Path() string { return filepath.Join(f.dir.Path(), f.name) }

func (f File) String() string { return f.Path() }

// Dir is the directory that holds the file.
func (f File) Dir() Dir { return f.dir }

// Name is the file's name in Dir: one path element.
func (f File) Name() string { return f.name }

// With is the file whose name is f's and suffix, beside f.
func (f File) With(suffix string) File { return File{dir: f.dir, name: f.name + suffix} }

// Open opens the file for reading.
func (f File) Open() (*os.File, error) { return f.dir.OpenFile(f.name, os.O_RDONLY, 0) }

// Stat describes the file itself, never what a symlink there names.
func (f File) Stat() (fs.FileInfo, error) {
	h, err := f.dir.Open(false)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	p, err := h.OpenPath(f.name)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.Stat()
}

// Scratch is a new file in d with no name (O_TMPFILE, or named and removed
// at once), for data that must not stay in memory: gone once closed,
// whatever happens to the process.
func (d Dir) Scratch() (*os.File, error) { return unnamedFile(d) }

// namedThenRemoved is a temp file in dir whose name is removed at once; a
// name left by a kill in between is swept with the state dir's other
// temp files.
func namedThenRemoved(dir *hostfs.Dir) (*os.File, error) {
	f, tmp, err := dir.CreateTemp("spill")
	if err != nil {
		return nil, err
	}
	if err := dir.Remove(tmp); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
