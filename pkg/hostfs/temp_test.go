//go:build linux

package hostfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// temps lists cortex-sync temp files in dir.
func temps(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if IsTemp(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names
}

func openDir(t *testing.T, dir string) *Dir {
	t.Helper()
	r, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	d, err := r.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("source went away")
	}
	n := min(len(p), r.n)
	r.n -= n
	return n, nil
}

func TestWriteTempErrorRemovesTemp(t *testing.T) {
	dir := t.TempDir()
	d := openDir(t, dir)
	_, _, err := d.WriteTemp("config", &failingReader{n: 100 << 10}, Attrs{Mode: 0o644, UID: -1, GID: -1})
	if err == nil || !strings.Contains(err.Error(), "source went away") {
		t.Fatalf("err = %v, want the reader's error", err)
	}
	if left := temps(t, dir); len(left) != 0 {
		t.Fatalf("a failed write left %v", left)
	}
}

// TestFullDiskRecovers fills a real 1 MB tmpfs: the write fails with ENOSPC,
// leaves no temp file behind, and so the next write fits.
func TestFullDiskRecovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	d := openDir(t, dir)
	a := Attrs{Mode: 0o644, UID: -1, GID: -1}

	_, _, err := d.WriteTemp("big", bytes.NewReader(make([]byte, 2<<20)), a)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 2 MB to a 1 MB disk: err = %v, want ENOSPC", err)
	}
	if left := temps(t, dir); len(left) != 0 {
		t.Fatalf("the failed write left %v, filling the disk", left)
	}
	tmp, _, err := d.WriteTemp("small", bytes.NewReader(make([]byte, 512<<10)), a)
	if err != nil {
		t.Fatalf("a write that fits after the failure: %v", err)
	}
	if err := d.Rename(tmp, "small"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "small")); err != nil || fi.Size() != 512<<10 {
		t.Fatalf("small: %v, %v", fi, err)
	}
}

func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	d := openDir(t, dir)
	long := strings.Repeat("x", 150) + ".conf"
	longTwin := strings.Repeat("x", 150) + ".yaml" // same first 100 bytes
	made := func(name string) string {
		tmp, _, err := d.WriteTemp(name, strings.NewReader("x"), Attrs{Mode: 0o644, UID: -1, GID: -1})
		if err != nil {
			t.Fatal(err)
		}
		return tmp
	}
	// Left by this process and by a killed one, and a symlink's temp.
	ours := []string{made("app.conf"), made("app.conf"), tempPrefix + "4242-zz-app.conf"}
	os.WriteFile(filepath.Join(dir, ours[2]), nil, 0o600)
	link := tempName("app.conf")
	os.Symlink("target", filepath.Join(dir, link))
	ours = append(ours, link)
	keep := []string{
		"app.conf",
		tempPrefix + "notes",
		tempPrefix + "4242-zz-app.conf.bak",
		tempPrefix + "4242-zz-other.conf",
		tempPrefix + "x-1-app.conf",  // not a pid
		tempPrefix + "42-A-app.conf", // not our sequence numbers
		tempPrefix + "42--app.conf",  // no sequence number
		"app.conf" + tempPrefix + "1-1-app.conf",
		made("other.conf"),
		made("app"),
		made(longTwin),
	}
	for _, k := range keep[:8] {
		os.WriteFile(filepath.Join(dir, k), nil, 0o600)
	}
	// A directory with a temp's name is not ours to remove.
	dirLike := tempPrefix + "7-7-app.conf"
	os.Mkdir(filepath.Join(dir, dirLike), 0o755)
	keep = append(keep, dirLike)

	n, err := d.RemoveTemps("app.conf")
	if err != nil || n != len(ours) {
		t.Fatalf("RemoveTemps = %d, %v; want %d removed", n, err, len(ours))
	}
	longTemp := made(long)
	if n, err := d.RemoveTemps(long); err != nil || n != 1 {
		t.Fatalf("RemoveTemps(long name) = %d, %v; want 1", n, err)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	for _, k := range keep {
		if !slices.Contains(left, k) {
			t.Errorf("%s was removed", k)
		}
	}
	for _, o := range append(ours, longTemp) {
		if slices.Contains(left, o) {
			t.Errorf("%s survived", o)
		}
	}
	if n, err := d.RemoveTemps("app.conf"); n != 0 || err != nil {
		t.Fatalf("second sweep = %d, %v", n, err)
	}
}
