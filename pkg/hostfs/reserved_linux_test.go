package hostfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReservedThroughBindMount: the state dir shown at another path by a
// bind mount is still never entered to be removed: by its path it is not
// reserved, by what it is it is (the purge of the mount's parent once
// backed the state dir up into itself).
func TestReservedThroughBindMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a bind mount needs root")
	}
	rootDir := t.TempDir()
	state := filepath.Join(rootDir, "var/lib/cs")
	alias := filepath.Join(rootDir, "data/lib")
	for _, d := range []string{state, alias} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(state, "state.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(filepath.Join(rootDir, "var/lib"), alias, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(alias, unix.MNT_DETACH) })
	r, err := Open(rootDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Reserve("/var/lib/cs")
	r.ReserveDir(state)
	data, err := r.OpenDir("/data")
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	if err := data.RemoveAll("lib"); !errors.Is(err, ErrReserved) {
		t.Fatalf("remove all through the bind mount: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, "state.json")); err != nil {
		t.Fatalf("the state dir lost its snapshot: %v", err)
	}
}
