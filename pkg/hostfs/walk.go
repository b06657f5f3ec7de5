package hostfs

import (
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// maxHops bounds the symlinks one resolution follows, as the kernel's ELOOP.
const maxHops = 40

// walkInRoot opens rel under the directory rootfd with chroot semantics, as
// openat2 RESOLVE_IN_ROOT does: ".." stops at the root and absolute
// symlinks resolve inside it. It goes a component at a time with
// O_NOFOLLOW, so no step can leave the root. It serves where openat2 does
// not exist: macOS, and Linux before 5.6.
func walkInRoot(rootfd int, rel string, flags int) (int, error) {
	dup := func(fd int) (int, error) {
		return unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	cur, err := dup(rootfd)
	if err != nil {
		return -1, err
	}
	var stack []int // the directories above cur, for ".."
	closeAll := func() {
		unix.Close(cur)
		for _, fd := range stack {
			unix.Close(fd)
		}
	}
	parts := strings.Split(rel, "/")
	for hops := 0; len(parts) > 0; {
		name := parts[0]
		parts = parts[1:]
		switch name {
		case "", ".":
			if len(parts) == 0 {
				fd, err := unix.Openat(cur, ".", flags, 0)
				closeAll()
				return fd, err
			}
			continue
		case "..":
			if n := len(stack); n > 0 {
				unix.Close(cur)
				cur, stack = stack[n-1], stack[:n-1]
			}
			if len(parts) == 0 {
				parts = []string{"."}
			}
			continue
		}
		last := len(parts) == 0
		var st unix.Stat_t
		if err := unix.Fstatat(cur, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK && !(last && flags&unix.O_NOFOLLOW != 0) {
			if hops++; hops > maxHops {
				closeAll()
				return -1, unix.ELOOP
			}
			buf := make([]byte, 4096)
			n, err := unix.Readlinkat(cur, name, buf)
			if err != nil {
				closeAll()
				return -1, err
			}
			target := string(buf[:n])
			if strings.HasPrefix(target, "/") {
				for _, fd := range stack {
					unix.Close(fd)
				}
				stack = nil
				unix.Close(cur)
				if cur, err = dup(rootfd); err != nil {
					return -1, err
				}
			}
			parts = append(strings.Split(strings.TrimPrefix(target, "/"), "/"), parts...)
			continue
		}
		if last {
			fd, err := unix.Openat(cur, name, flags|unix.O_NOFOLLOW, 0)
			closeAll()
			return fd, err
		}
		next, err := unix.Openat(cur, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll()
			return -1, err
		}
		stack = append(stack, cur)
		cur = next
	}
	fd, err := unix.Openat(cur, ".", flags, 0)
	closeAll()
	return fd, err
}

// walkBeneath opens rel below dirfd a component at a time, each with
// O_NOFOLLOW: any symlink on the way, or an escape, is refused, as openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS does. With no symlink followed, ".."
// means what it says lexically, so the path is cleaned first.
func walkBeneath(dirfd int, rel string, flags int) (int, error) {
	rel = path.Clean(rel)
	if rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
		return -1, unix.EXDEV
	}
	parts := strings.Split(rel, "/")
	cur := dirfd
	defer func() {
		if cur != dirfd {
			unix.Close(cur)
		}
	}()
	for i, name := range parts {
		f := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i == len(parts)-1 {
			f = flags | unix.O_NOFOLLOW
		}
		next, err := unix.Openat(cur, name, f, 0)
		if err != nil {
			return -1, err
		}
		if cur != dirfd {
			unix.Close(cur)
		}
		cur = next
	}
	fd := cur
	cur = dirfd // handed over, not closed
	return fd, nil
}
