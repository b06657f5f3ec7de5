//go:build linux

package hostfs

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
	dead := strconv.Itoa(deadPID(t))
	ours := []string{made("app.conf"), made("app.conf"), tempPrefix + dead + "-zz-app.conf"}
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

// deadPID is the pid of a process that has ended and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// liveChild starts a process that outlives the test, and ends it after.
func liveChild(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestAbandoned: a temp file is its writer's while that very process
// lives, whatever its age; gone once it ends (a zombie included) or once
// its pid is another process's.
func TestAbandoned(t *testing.T) {
	live := liveChild(t)
	pid := strconv.Itoa(live.Process.Pid)
	p, ok := readProc(live.Process.Pid)
	if !ok || p.token == "" {
		t.Fatalf("/proc/%s/stat: %+v, %v", pid, p, ok)
	}
	zombie := exec.Command("sleep", "600")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	zombie.Process.Signal(syscall.SIGKILL)
	t.Cleanup(func() { zombie.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; {
		if z, ok := readProc(zombie.Process.Pid); ok && z.dead || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	self := self()
	other := "zzzzzzzz" // no process's token
	dead := strconv.Itoa(deadPID(t))
	for _, c := range []struct {
		name      string
		abandoned bool
	}{
		{tempName("pack"), false}, // this process's
		{tempPrefix + pid + "-" + p.token + ".1-pack", false},
		{tempPrefix + pid + "-1-pack", false},                                 // no token: the pid is alive
		{tempPrefix + pid + "-" + other + ".1-pack", true},                    // the pid is another process's now
		{tempPrefix + strconv.Itoa(self.pid) + "-" + other + ".1-pack", true}, // this pid, an earlier process's
		{tempPrefix + dead + "-" + p.token + ".1-pack", true},
		{tempPrefix + dead + "-1-pack", true},
		{tempPrefix + strconv.Itoa(zombie.Process.Pid) + "-1-pack", true},
		{tempPrefix + "state.json.1", true}, // an older version's: no pid
		{"pack", false},
		{"pack" + tempPrefix + dead + "-1-pack", false},
	} {
		if got := Abandoned(c.name); got != c.abandoned {
			t.Errorf("Abandoned(%s) = %v, want %v", c.name, got, c.abandoned)
		}
	}
}

// TestRemoveAbandoned: opening a directory sweeps what killed writers
// left and keeps what live ones, this process among them, are writing.
func TestRemoveAbandoned(t *testing.T) {
	dir := t.TempDir()
	d := openDir(t, dir)
	live := liveChild(t)
	p, _ := readProc(live.Process.Pid)
	dead := strconv.Itoa(deadPID(t))
	mine, _, err := d.CreateTemp("pack")
	if err != nil {
		t.Fatal(err)
	}
	mine.Close()
	old := time.Now().Add(-30 * 24 * time.Hour)
	keep := []string{
		"pack-1.pack",
		filepath.Base(mine.Name()),
		tempPrefix + strconv.Itoa(live.Process.Pid) + "-" + p.token + ".7-pack",
		tempPrefix + strconv.Itoa(live.Process.Pid) + "-7-pack",
	}
	gone := []string{
		tempPrefix + dead + "-" + p.token + ".7-pack",
		tempPrefix + dead + "-7-pack.idx",
		tempPrefix + "spill",
	}
	for _, n := range append(keep[2:], gone...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("half a pack"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(filepath.Join(dir, n), old, old) // age is no reason
	}
	os.WriteFile(filepath.Join(dir, keep[0]), nil, 0o600)
	n, err := d.RemoveAbandoned()
	if err != nil || n != len(gone) {
		t.Fatalf("RemoveAbandoned = %d, %v; want %d", n, err, len(gone))
	}
	for _, k := range keep {
		if _, err := os.Lstat(filepath.Join(dir, k)); err != nil {
			t.Errorf("%s was removed", k)
		}
	}
	for _, g := range gone {
		if _, err := os.Lstat(filepath.Join(dir, g)); err == nil {
			t.Errorf("%s survived", g)
		}
	}
	// RemoveTemps, by the one writer of a name in this process, takes this
	// process's own too, and still not a live one's.
	if n, err := d.RemoveTemps("pack"); err != nil || n != 1 {
		t.Fatalf("RemoveTemps = %d, %v; want this process's 1", n, err)
	}
	for _, k := range keep[2:] {
		if _, err := os.Lstat(filepath.Join(dir, k)); err != nil {
			t.Errorf("%s was removed by RemoveTemps", k)
		}
	}
}
