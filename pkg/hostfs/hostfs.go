// Package hostfs is the agent's only door to the host filesystem: every path
// resolves under a root with chroot semantics (openat2 RESOLVE_IN_ROOT) and is
// checked against the allowed paths, and all work happens on directory
// descriptors that never follow the last component. A directory cortex-sync
// owns (the state dir) is opened with OpenOwned: below it no symlink is
// followed at all.
package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotAllowed reports a path that resolves outside the allowed paths.
var ErrNotAllowed = errors.New("outside the allowed paths")

// ErrReserved reports a write on, into or over a path cortex-sync owns
// (its state dir, its config and key files).
var ErrReserved = errors.New("reserved: cortex-sync keeps its own state or trust there")

// Root is a host directory that confines every operation below it.
type Root struct {
	dir     string   // absolute, symlink-free host path of the root
	fd      int      // O_PATH descriptor of dir
	allowed []string // clean absolute in-root prefixes; empty allows all
	// reserved are in-root paths cortex-sync owns: nothing is written at
	// or below one, and nothing above one is removed or replaced whole.
	reserved []string
	// reservedIDs are the device and inode of the directories reserved by
	// host path: a walk that removes or copies a tree stops at one
	// whatever path it came by (a bind mount shows it under another).
	reservedIDs []fileID
}

// fileID names a file whatever path leads to it.
type fileID struct{ dev, ino uint64 }

// ReserveDir reserves the host directory dir (the state dir) by what it
// is, not where: a tree walked for removal or a backup never enters it,
// even through a bind mount that shows it at another path, or when --root
// is a bind mount of what holds it. A dir that does not exist is skipped.
func (r *Root) ReserveDir(dir string) {
	var st unix.Stat_t
	if unix.Stat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		r.reservedIDs = append(r.reservedIDs, fileID{uint64(st.Dev), st.Ino})
	}
}

// reservedDir reports whether the entry name of the directory fd is a
// directory reserved by ReserveDir.
func (r *Root) reservedDir(fd int, name string) bool {
	if len(r.reservedIDs) == 0 {
		return false
	}
	var st unix.Stat_t
	if lstatAt(fd, name, &st) != nil {
		return false
	}
	id := fileID{uint64(st.Dev), st.Ino}
	for _, q := range r.reservedIDs {
		if q == id {
			return true
		}
	}
	return false
}

// Reserve adds in-root paths that no write through the root may reach:
// nothing is created, changed or removed at or below them, and no entry
// above one is removed, replaced or renamed whole. Reads are not limited.
// Call it before the root is used.
func (r *Root) Reserve(paths ...string) {
	for _, p := range paths {
		r.reserved = append(r.reserved, path.Clean("/"+p))
	}
}

// near reports whether the in-root directory p is, lies below or above a
// reserved path: only the entries of such a directory are checked.
func (r *Root) near(p string) bool {
	for _, q := range r.reserved {
		if within(p, q) || within(q, p) {
			return true
		}
	}
	return false
}

// reaches finds the reserved path that p is or lies below, or with above,
// also one that lies below p.
func (r *Root) reaches(p string, above bool) (string, bool) {
	for _, q := range r.reserved {
		if within(p, q) || above && within(q, p) {
			return q, true
		}
	}
	return "", false
}

// Open opens dir as the root. allowed lists in-root path prefixes that may be
// written; when empty the whole root may be.
func Open(dir string, allowed []string) (*Root, error) {
	umask() // read while nothing else creates files: reading it sets it
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", dir, err)
	}
	fd, err := unix.Open(real, oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open root", Path: real, Err: err}
	}
	r := &Root{dir: real, fd: fd}
	for _, a := range allowed {
		if !path.IsAbs(a) {
			unix.Close(fd)
			return nil, fmt.Errorf("allowed path %q: must be absolute", a)
		}
		r.allowed = append(r.allowed, path.Clean(a))
	}
	return r, nil
}

// Close releases the root descriptor.
func (r *Root) Close() error { return unix.Close(r.fd) }

// Dir is the host directory the root lives in.
func (r *Root) Dir() string { return r.dir }

// Allowed reports whether the in-root path p may be written. Ancestors of an
// allowed path are allowed too, so that missing parents can be created.
func (r *Root) Allowed(p string) bool {
	if len(r.allowed) == 0 {
		return true
	}
	for _, a := range r.allowed {
		if within(p, a) || within(a, p) {
			return true
		}
	}
	return false
}

// AllowedWrite reports whether p lies inside (not merely above) an allowed path.
func (r *Root) AllowedWrite(p string) bool {
	if len(r.allowed) == 0 {
		return true
	}
	for _, a := range r.allowed {
		if within(p, a) {
			return true
		}
	}
	return false
}

// within reports whether p is base or lies below it.
func within(p, base string) bool {
	if base == "/" || p == base {
		return true
	}
	return strings.HasPrefix(p, base+"/")
}

// SyncFS flushes the filesystem that holds the root: one call makes a whole
// batch of writes durable.
func (r *Root) SyncFS() error {
	fd, err := unix.Openat(r.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return syncfs(fd)
}

// resolve opens the in-root directory p (following symlinks inside the root).
func (r *Root) resolve(p string, flags int) (int, error) {
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		rel = "."
	}
	return openInRoot(r.fd, rel, flags|unix.O_DIRECTORY|unix.O_CLOEXEC)
}

// inRoot maps the host path of an open descriptor back to its in-root path.
func (r *Root) inRoot(fd int) (string, error) {
	real, err := fdPath(fd)
	if err != nil {
		return "", err
	}
	if r.dir == "/" {
		return real, nil
	}
	if real == r.dir {
		return "/", nil
	}
	if rest, ok := strings.CutPrefix(real, r.dir+"/"); ok {
		return "/" + rest, nil
	}
	return "", fmt.Errorf("%s resolved outside the root", real)
}

// OpenDir opens the existing in-root directory p for reading and writing
// entries. The returned Dir knows where p really resolved to.
func (r *Root) OpenDir(p string) (*Dir, error) {
	fd, err := r.resolve(p, unix.O_RDONLY)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	real, err := r.inRoot(fd)
	if err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return r.newDir(fd, real), nil
}

// newDir is the Dir of descriptor fd at the in-root path p.
func (r *Root) newDir(fd int, p string) *Dir {
	return &Dir{root: r, fd: fd, path: p, near: r.near(p)}
}

// Parent opens the directory that holds p and returns it with p's last
// element. With create, missing parents are made (0755); they are never
// recorded as managed. The returned Dir has been checked against the allowed
// paths, so writes of the last element through it are permitted.
func (r *Root) Parent(p string, create bool) (*Dir, string, error) {
	p = path.Clean(p)
	if p == "/" {
		return nil, "", fmt.Errorf("%s: the root itself cannot be managed", p)
	}
	dir, base := path.Split(p)
	d, err := r.OpenDir(dir)
	if err != nil && create && errors.Is(err, fs.ErrNotExist) {
		d, err = r.mkdirAll(path.Clean(dir))
	}
	if err != nil {
		return nil, "", err
	}
	if !r.AllowedWrite(path.Join(d.path, base)) {
		d.Close()
		return nil, "", &fs.PathError{Op: "write", Path: p, Err: fmt.Errorf("resolves to %s, %w", path.Join(d.path, base), ErrNotAllowed)}
	}
	return d, base, nil
}

// mkdirAll creates the in-root directory p and its missing parents.
func (r *Root) mkdirAll(p string) (*Dir, error) {
	if d, err := r.OpenDir(p); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return d, err
	}
	parent, err := r.mkdirAll(path.Dir(p))
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	base := path.Base(p)
	if !r.Allowed(path.Join(parent.path, base)) {
		return nil, &fs.PathError{Op: "mkdir", Path: p, Err: ErrNotAllowed}
	}
	if err := parent.Mkdir(base, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	// Reopen through the root: a racing creator may have made it a symlink.
	return r.OpenDir(p)
}

// Lstat describes the in-root path p without following its last element.
func (r *Root) Lstat(p string) (Stat, error) {
	p = path.Clean(p)
	if p == "/" {
		var st unix.Stat_t
		err := unix.Fstat(r.fd, &st)
		return statOf(&st), err
	}
	d, err := r.OpenDir(path.Dir(p))
	if err != nil {
		return Stat{}, err
	}
	defer d.Close()
	return d.Lstat(path.Base(p))
}

// OpenFile opens the in-root path p for reading, following symlinks only
// inside the root.
func (r *Root) OpenFile(p string) (*os.File, error) {
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		rel = "."
	}
	fd, err := openInRoot(r.fd, rel, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}
