//go:build linux

package hostfs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The walk that serves where openat2 does not exist resolves every path as
// openat2 RESOLVE_IN_ROOT does: the same directory, or an error alike.
func TestWalkInRootMatchesOpenat2(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/b/c", "x"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "a/f"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"abs":      "/a/b",        // absolute: inside the root
		"a/rel":    "../x",        // relative, up one
		"a/b/up":   "../../../..", // tries to climb out
		"a/b/etc":  "/etc",        // a host path: re-rooted
		"loop1":    "loop2",
		"loop2":    "loop1",
		"a/tofile": "f",
		"chain":    "abs/c/../..",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	rootfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootfd)
	real, _ := filepath.EvalSymlinks(root)
	where := func(fd int, err error) string {
		if err != nil {
			return "error " + err.Error()
		}
		defer unix.Close(fd)
		p, err := fdPath(fd)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(real, p)
		return rel
	}
	dirFlags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	for _, c := range []struct {
		rel   string
		flags int
	}{
		{".", dirFlags}, {"a", dirFlags}, {"a/b/c", dirFlags}, {"abs", dirFlags}, {"abs/c", dirFlags},
		{"a/rel", dirFlags}, {"a/b/up", dirFlags}, {"a/b/up/a", dirFlags}, {"../../a", dirFlags},
		{"a/../../x", dirFlags}, {"a/b/etc", dirFlags}, {"loop1", dirFlags}, {"chain", dirFlags},
		{"chain/x", dirFlags}, {"missing/a", dirFlags}, {"a/f", dirFlags}, {"a/tofile", unix.O_RDONLY | unix.O_CLOEXEC},
		{"a/f/x", unix.O_RDONLY | unix.O_CLOEXEC}, {"abs", unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC},
	} {
		how := unix.OpenHow{Flags: uint64(c.flags), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
		want := where(unix.Openat2(rootfd, c.rel, &how))
		got := where(walkInRoot(rootfd, c.rel, c.flags))
		if got != want {
			t.Errorf("%s: the walk gives %q, openat2 %q", c.rel, got, want)
		}
	}
	// The walk beneath refuses what openat2 RESOLVE_BENEATH|NO_SYMLINKS does.
	for _, rel := range []string{"a", "a/b/c", "abs", "abs/c", "a/rel", "a/../a", "../a", "a/b/../../x", "/a", "a/f", "missing"} {
		how := unix.OpenHow{Flags: uint64(dirFlags), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		_, werr := unix.Openat2(rootfd, rel, &how)
		fd, gerr := walkBeneath(rootfd, rel, dirFlags)
		if gerr == nil {
			unix.Close(fd)
		}
		if (werr == nil) != (gerr == nil) {
			t.Errorf("beneath %s: the walk gives %v, openat2 %v", rel, gerr, werr)
		}
	}
}
