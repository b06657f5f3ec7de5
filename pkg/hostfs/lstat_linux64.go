//go:build linux && (amd64 || arm64)

package hostfs

import (
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lstatAt describes name in dirfd without following it. The name goes to
// the kernel from a buffer on the stack: a walk stats every entry of a
// tree, and unix.Fstatat allocates a copy of each name.
func lstatAt(dirfd int, name string, st *unix.Stat_t) error {
	var buf [256]byte
	if len(name) >= len(buf) || strings.IndexByte(name, 0) >= 0 {
		return unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
	}
	copy(buf[:], name)
	for {
		_, _, errno := syscall.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(&buf[0])),
			uintptr(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW, 0, 0)
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return errno
	}
}
