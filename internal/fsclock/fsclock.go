// Package fsclock helps tests that depend on the filesystem's clock: a
// file written in the same tick as an index was saved is racily clean
// and hashed again on every check, as Git's index does.
package fsclock

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// WaitPast waits until a file made in dir has a ctime later than the
// file than's: what is written from then on is newer than than. It
// polls by writing a probe file, and fails the test should the clock not
// move in 100,000 writes.
func WaitPast(t testing.TB, dir, than string) {
	t.Helper()
	old := ctime(t, than)
	probe := filepath.Join(dir, ".fsclock-probe")
	defer os.Remove(probe)
	for range 100000 {
		if err := os.WriteFile(probe, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if ctime(t, probe) > old {
			return
		}
	}
	t.Fatal("the filesystem's clock did not move")
}

func ctime(t testing.TB, p string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ctim.Nano()
}
