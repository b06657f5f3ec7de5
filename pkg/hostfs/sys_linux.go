package hostfs

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

const (
	// oPath opens a directory only to resolve paths under it.
	oPath = unix.O_PATH
	// oPathNoFollow opens a name itself, even a symlink, for Stat only.
	oPathNoFollow = unix.O_PATH | unix.O_NOFOLLOW
)

// openInRoot opens rel under the directory rootfd with chroot semantics:
// "..", and absolute symlinks, resolve inside it (openat2 RESOLVE_IN_ROOT, or
// a walk a component at a time on kernels before 5.6).
func openInRoot(rootfd int, rel string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(rootfd, rel, &how)
		switch err {
		case unix.EINTR, unix.EAGAIN:
			continue
		case unix.ENOSYS:
			return walkInRoot(rootfd, rel, flags)
		}
		return fd, err
	}
}

// openBeneath opens rel below dirfd refusing any symlink and any escape
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or a walk before 5.6).
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(dirfd, rel, &how)
		switch err {
		case unix.EINTR, unix.EAGAIN:
			continue
		case unix.ENOSYS:
			return walkBeneath(dirfd, rel, flags)
		}
		return fd, err
	}
}

// fdPath is the host path an open descriptor resolved to.
func fdPath(fd int) (string, error) { return os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)) }

// syncfs flushes the filesystem that holds fd.
func syncfs(fd int) error { return unix.Syncfs(fd) }
