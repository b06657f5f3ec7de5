//go:build !(linux && (amd64 || arm64))

package hostfs

import "golang.org/x/sys/unix"

// lstatAt describes name in dirfd without following it.
func lstatAt(dirfd int, name string, st *unix.Stat_t) error {
	return unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
}
