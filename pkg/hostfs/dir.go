package hostfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Dir is an open directory inside a Root. Names passed to its methods are
// single path elements; the last element is never followed.
type Dir struct {
	root   *Root
	fd     int
	path   string     // in-root path the directory really resolved to
	listMu sync.Mutex // List reads from the descriptor's own offset
	listed bool       // the offset moved: a List rewinds it (under listMu)
	// near: the directory is, lies in or above a reserved path of its
	// root, so writes of its entries are checked against them.
	near bool
}

// refuse is the error of op on the entry name when that reaches a path
// the root reserves: name is or lies in one, or, with above, holds one.
// It costs nothing in a directory far from every reserved path.
func (d *Dir) refuse(op, name string, above bool) error {
	if !d.near || d.root == nil {
		return nil
	}
	p := path.Join(d.path, name)
	if q, ok := d.root.reaches(p, above); ok {
		return &fs.PathError{Op: op, Path: p, Err: fmt.Errorf("%w (%s)", ErrReserved, q)}
	}
	return nil
}

// Reserved is the error of replacing or removing the entry name whole
// when that would reach a path the root reserves (a backup of it would
// copy cortex-sync's own state).
func (d *Dir) Reserved(name string) error { return d.refuse("replace", name, true) }

// EnterReserved is the error of walking into the directory name to copy
// or remove what it holds when it is a directory the root reserves by
// what it is (Root.ReserveDir), whatever path led there.
func (d *Dir) EnterReserved(name string) error {
	if d.root != nil && d.root.reservedDir(d.fd, name) {
		return &fs.PathError{Op: "enter", Path: path.Join(d.path, name), Err: fmt.Errorf("%w (it is the state dir, by another path)", ErrReserved)}
	}
	return nil
}

// Path is the in-root path of the directory, after symlinks.
func (d *Dir) Path() string { return d.path }

// Close releases the descriptor. A second Close does nothing: the number
// may be another file's by then.
func (d *Dir) Close() error {
	if d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

// Stat is what the quick drift check compares: the fields git's index keeps.
type Stat struct {
	Ino   uint64      `json:"ino"`
	Size  int64       `json:"size"`
	Mtime int64       `json:"mtime"` // nanoseconds
	Ctime int64       `json:"ctime"` // nanoseconds
	Mode  fs.FileMode `json:"mode"`  // type and permission bits
	UID   uint32      `json:"uid"`
	GID   uint32      `json:"gid"`
}

// Same reports whether nothing the quick check looks at has moved.
func (s Stat) Same(o Stat) bool {
	return s.Ino == o.Ino && s.Size == o.Size && s.Mtime == o.Mtime && s.Ctime == o.Ctime && s.Mode == o.Mode
}

func statOf(st *unix.Stat_t) Stat {
	mode := fs.FileMode(st.Mode & 0o777)
	if st.Mode&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFREG:
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	default:
		mode |= fs.ModeDevice
	}
	return Stat{
		Ino: st.Ino, Size: st.Size, Mode: mode, UID: st.Uid, GID: st.Gid,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(),
	}
}

func (d *Dir) pathErr(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: path.Join(d.path, name), Err: err}
}

// Lstat describes name without following it.
func (d *Dir) Lstat(name string) (Stat, error) {
	var st unix.Stat_t
	if err := lstatAt(d.fd, name, &st); err != nil {
		return Stat{}, d.pathErr("lstat", name, err)
	}
	return statOf(&st), nil
}

// OpenDir opens the subdirectory name, refusing a symlink.
func (d *Dir) OpenDir(name string) (*Dir, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, d.pathErr("open", name, err)
	}
	return d.sub(fd, path.Join(d.path, name)), nil
}

// sub is the Dir of descriptor fd at the in-root path p, of d's root.
func (d *Dir) sub(fd int, p string) *Dir {
	if d.root == nil {
		return &Dir{fd: fd, path: p}
	}
	return d.root.newDir(fd, p)
}

// Open opens the regular file name for reading, refusing a symlink.
func (d *Dir) Open(name string) (*os.File, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, d.pathErr("open", name, err)
	}
	return os.NewFile(uintptr(fd), path.Join(d.path, name)), nil
}

// OpenPath opens name itself, even a symlink, for Stat only (O_PATH).
func (d *Dir) OpenPath(name string) (*os.File, error) {
	fd, err := unix.Openat(d.fd, name, oPathNoFollow|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, d.pathErr("open", name, err)
	}
	return os.NewFile(uintptr(fd), path.Join(d.path, name)), nil
}

// Readlink returns the target of the symlink name.
func (d *Dir) Readlink(name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(d.fd, name, buf)
		if err != nil {
			return "", d.pathErr("readlink", name, err)
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Mkdir creates the directory name.
func (d *Dir) Mkdir(name string, perm fs.FileMode) error {
	if err := d.refuse("mkdir", name, false); err != nil {
		return err
	}
	if err := unix.Mkdirat(d.fd, name, uint32(perm.Perm())); err != nil {
		return d.pathErr("mkdir", name, err)
	}
	return nil
}

var tmpSeq atomic.Uint64

// umask is the process umask, read once: reading it means setting it.
var umask = sync.OnceValue(func() uint32 {
	u := unix.Umask(0o022)
	unix.Umask(u)
	return uint32(u)
})

const tempPrefix = ".cortex-sync-"

// IsTemp reports whether name is a temporary file of cortex-sync's: in
// use by its writer, or left behind when a write was interrupted
// (Abandoned tells which).
func IsTemp(name string) bool { return strings.HasPrefix(name, tempPrefix) }

// tempName is a name in the directory that no one else will pick, and
// that says who writes it (temp.go): tempPrefix, pid, "-", the process's
// token and ".", a sequence number in base 36, "-", tempBase(name).
func tempName(name string) string {
	n := tmpSeq.Add(1)
	w := self()
	id := strconv.Itoa(w.pid) + "-"
	if w.token != "" {
		id += w.token + "."
	}
	return tempPrefix + id + strconv.FormatUint(n, 36) + "-" + tempBase(name)
}

// tempBase is name, or for a name too long to fit beside the prefix, its
// start and a hash of the whole, so that a temp file names exactly one base.
func tempBase(name string) string {
	if len(name) <= 100 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:83] + "~" + hex.EncodeToString(sum[:8])
}

// isTempOf reports whether entry is a name tempName made for name.
func isTempOf(entry, name string) bool {
	_, base, ok := parseTemp(entry)
	return ok && base == tempBase(name)
}

// RemoveTemps removes the temporary files that writes of name left in the
// directory (a process killed between WriteTemp and Rename leaves one) and
// reports how many it removed. Only names tempName makes for exactly this
// name are touched, and of those only this process's and those of writers
// that are gone (Abandoned): another live process's write stays. Call it
// when this process writes no temp file of name.
func (d *Dir) RemoveTemps(name string) (int, error) {
	return d.removeTemps(func(entry string) bool {
		if !isTempOf(entry, name) {
			return false
		}
		w, _, _ := parseTemp(entry)
		return w.mine() || w.gone()
	})
}

// Attrs are the attributes cortex-sync sets on what it writes. A negative
// UID or GID leaves that owner alone.
type Attrs struct {
	Mode fs.FileMode
	UID  int
	GID  int
}

// WriteTemp writes r into a new temporary file beside name and returns its
// name and the Sums of what was written. The file has its final mode and
// owner but is not synced: the caller batches durability, then calls Rename.
// On any error the temporary file is gone again.
func (d *Dir) WriteTemp(name string, r io.Reader, a Attrs) (string, Sums, error) {
	if err := d.refuse("write", name, false); err != nil {
		return "", Sums{}, err
	}
	tmp := tempName(name)
	// Created with its final permissions when the umask cannot change them
	// (the usual 022 with 0644 or 0755), sparing a chmod per file.
	perm, chmod := uint32(0o600), true
	if u := umask(); a.Mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) == 0 && uint32(a.Mode.Perm())&u == 0 {
		perm, chmod = uint32(a.Mode.Perm()), false
	}
	fd, err := unix.Openat(d.fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return "", Sums{}, d.pathErr("create", tmp, err)
	}
	f := os.NewFile(uintptr(fd), path.Join(d.path, tmp))
	// Cleanup keys on done, not on an error result: every return path (and
	// a panicking reader) leaves no temp file to fill the disk.
	done := false
	defer func() {
		if !done {
			f.Close()
			unix.Unlinkat(d.fd, tmp, 0)
		}
	}()
	h := newSummer()
	bp := hashBufs.Get().(*[]byte)
	defer hashBufs.Put(bp)
	// The file as a plain writer: its ReadFrom would allocate a buffer of
	// its own for every file.
	if _, err := io.CopyBuffer(struct{ io.Writer }{f}, io.TeeReader(r, h), *bp); err != nil {
		return "", Sums{}, d.pathErr("write", name, err)
	}
	if chmod || a.UID >= 0 || a.GID >= 0 {
		if err := fchattr(fd, a); err != nil {
			return "", Sums{}, d.pathErr("chmod", name, err)
		}
	}
	if err := f.Close(); err != nil {
		return "", Sums{}, d.pathErr("write", name, err)
	}
	done = true
	return tmp, h.sums(), nil
}

func fchattr(fd int, a Attrs) error {
	if a.UID >= 0 || a.GID >= 0 {
		if err := unix.Fchown(fd, a.UID, a.GID); err != nil {
			return err
		}
	}
	// chmod after chown: chown clears the set-id bits.
	return unix.Fchmod(fd, uint32(unixMode(a.Mode)))
}

func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		u |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		u |= unix.S_ISVTX
	}
	return u
}

// SyncFile flushes the file name to disk.
func (d *Dir) SyncFile(name string) error {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return d.pathErr("sync", name, err)
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}

// Rename moves old over new within the directory, atomically.
func (d *Dir) Rename(old, new string) error {
	if err := errors.Join(d.refuse("rename", old, true), d.refuse("rename", new, true)); err != nil {
		return err
	}
	if err := unix.Renameat(d.fd, old, d.fd, new); err != nil {
		return d.pathErr("rename", new, err)
	}
	return nil
}

// Symlink atomically makes name a symlink to target.
func (d *Dir) Symlink(target, name string) error {
	if err := d.refuse("symlink", name, true); err != nil {
		return err
	}
	tmp := tempName(name)
	if err := unix.Symlinkat(target, d.fd, tmp); err != nil {
		return d.pathErr("symlink", name, err)
	}
	if err := d.Rename(tmp, name); err != nil {
		unix.Unlinkat(d.fd, tmp, 0)
		return err
	}
	return nil
}

// SetAttrs sets mode and owner of name on its open descriptor, never through
// a symlink.
func (d *Dir) SetAttrs(name string, a Attrs) error {
	if err := d.refuse("chmod", name, false); err != nil {
		return err
	}
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return d.pathErr("chmod", name, err)
	}
	defer unix.Close(fd)
	if err := fchattr(fd, a); err != nil {
		return d.pathErr("chmod", name, err)
	}
	return nil
}

// Remove deletes the file, symlink or empty directory name. A missing name is
// not an error.
func (d *Dir) Remove(name string) error {
	if err := d.refuse("remove", name, true); err != nil {
		return err
	}
	err := unix.Unlinkat(d.fd, name, 0)
	if err == unix.EISDIR || err == unix.EPERM {
		err = unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR)
	}
	if err != nil && err != unix.ENOENT {
		return d.pathErr("remove", name, err)
	}
	return nil
}

// RemoveAll deletes name and, when it is a directory, everything below it,
// without following symlinks.
func (d *Dir) RemoveAll(name string) error {
	if err := d.refuse("remove", name, true); err != nil {
		return err // before anything below it goes
	}
	st, err := d.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode.IsDir() {
		if err := d.EnterReserved(name); err != nil {
			return err
		}
		sub, err := d.OpenDir(name)
		if err != nil {
			return err
		}
		entries, err := sub.ReadDir()
		if err == nil {
			for _, e := range entries {
				if err = sub.RemoveAll(e.Name()); err != nil {
					break
				}
			}
		}
		sub.Close()
		if err != nil {
			return err
		}
	}
	return d.Remove(name)
}

// Sync flushes the directory itself, making renames in it durable.
func (d *Dir) Sync() error {
	if err := unix.Fsync(d.fd); err != nil {
		return fmt.Errorf("sync %s: %w", d.path, err)
	}
	return nil
}

// Chown sets the owner of name without following it.
func (d *Dir) Chown(name string, uid, gid int) error {
	if err := d.refuse("chown", name, false); err != nil {
		return err
	}
	if err := unix.Fchownat(d.fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return d.pathErr("chown", name, err)
	}
	return nil
}

// Dup is another descriptor of the same directory, closed on its own. It
// is opened anew, not duplicated, so that each lists from its own offset.
func (d *Dir) Dup() (*Dir, error) {
	fd, err := openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", d.path, err)
	}
	return d.sub(fd, d.path), nil
}
