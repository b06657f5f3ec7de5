package hostfs

import (
	"bytes"
	"unsafe"

	"golang.org/x/sys/unix"
)

// macOS has neither O_PATH nor openat2: directories are opened for reading,
// and a path is resolved a component at a time (walkInRoot). The CLI builds
// there for validate, diff and plans.
const (
	oPath         = unix.O_RDONLY
	oPathNoFollow = unix.O_RDONLY | unix.O_SYMLINK
)

// openInRoot resolves a component at a time: macOS has no openat2.
func openInRoot(rootfd int, rel string, flags int) (int, error) {
	return walkInRoot(rootfd, rel, flags)
}

// openBeneath opens rel below dirfd refusing any symlink and any escape.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	return walkBeneath(dirfd, rel, flags)
}

// fdPath is the host path an open descriptor resolved to (F_GETPATH).
func fdPath(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	if _, _, errno := unix.Syscall(unix.SYS_FCNTL, uintptr(fd), unix.F_GETPATH, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		return "", errno
	}
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf), nil
}

// syncfs flushes every filesystem: macOS has no per-filesystem sync.
func syncfs(int) error {
	unix.Sync()
	return nil
}
