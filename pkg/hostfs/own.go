package hostfs

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// OpenOwned opens dir, a directory cortex-sync owns (its state dir), as a
// Dir. Symlinks in dir's own path are followed, as --root's are: it is the
// administrator's choice. Below it nothing is: every Dir method acts on
// the name itself, and OpenDirRel and MkdirAllRel refuse a symlink on the
// way, so nothing written into dir can lead a later write out of it. The
// Dir's Path is dir, absolute.
func OpenOwned(dir string) (*Dir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fd, err := openat(unix.AT_FDCWD, abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: abs, Err: err}
	}
	return &Dir{fd: fd, path: abs}, nil
}

// MkdirAllRel opens the directory rel below d (slash-separated), making
// what is missing of it with perm, and refuses a symlink on the way, or an
// escape, as OpenDirRel does.
func (d *Dir) MkdirAllRel(rel string, perm fs.FileMode) (*Dir, error) {
	rel = path.Clean(rel)
	sub, err := d.OpenDirRel(rel)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return sub, err
	}
	if rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
		return nil, d.pathErr("mkdir", rel, unix.EXDEV)
	}
	cur, err := d.Dup()
	if err != nil {
		return nil, err
	}
	for _, name := range strings.Split(rel, "/") {
		if err := cur.Mkdir(name, perm); err != nil && !errors.Is(err, fs.ErrExist) {
			cur.Close()
			return nil, err
		}
		next, err := cur.OpenDir(name) // a symlink made meanwhile is refused here
		cur.Close()
		if err != nil {
			return nil, err
		}
		cur = next
	}
	return cur, nil
}

// OpenFile opens the file name with flag (os.O_* or unix.O_*) and, when it
// creates it, perm; a symlink is never followed.
func (d *Dir) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	if flag&(unix.O_WRONLY|unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC) != 0 {
		if err := d.refuse("open", name, false); err != nil {
			return nil, err
		}
	}
	for {
		fd, err := unix.Openat(d.fd, name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, d.pathErr("open", name, err)
		}
		return os.NewFile(uintptr(fd), path.Join(d.path, name)), nil
	}
}

// CreateTemp creates a new temporary file beside name, 0600, for reading
// and writing, and returns it with its name: the caller renames it into
// place, or removes it (after a kill, RemoveTemps or RemoveAbandoned finds
// it by the pid in its name).
func (d *Dir) CreateTemp(name string) (*os.File, string, error) {
	tmp := tempName(name)
	f, err := d.OpenFile(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return nil, "", err
	}
	return f, tmp, nil
}

// Link makes new a hard link to old, never replacing new: a racing
// creator's file stays, and the error wraps fs.ErrExist.
func (d *Dir) Link(old, new string) error {
	if err := d.refuse("link", new, false); err != nil {
		return err
	}
	if err := unix.Linkat(d.fd, old, d.fd, new, 0); err != nil {
		return d.pathErr("link", new, err)
	}
	return nil
}

// RenameTo moves old, in d, to new, in to, atomically: both on one
// filesystem.
func (d *Dir) RenameTo(old string, to *Dir, new string) error {
	if err := errors.Join(d.refuse("rename", old, true), to.refuse("rename", new, true)); err != nil {
		return err
	}
	if err := unix.Renameat(d.fd, old, to.fd, new); err != nil {
		return to.pathErr("rename", new, err)
	}
	return nil
}

// NewSymlink makes name a symlink to target; an existing name is an error
// wrapping fs.ErrExist, never replaced.
func (d *Dir) NewSymlink(target, name string) error {
	if err := d.refuse("symlink", name, false); err != nil {
		return err
	}
	if err := unix.Symlinkat(target, d.fd, name); err != nil {
		return d.pathErr("symlink", name, err)
	}
	return nil
}
