//go:build linux

package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestReadOnlyMappings(t *testing.T) {
	maps := filepath.Join(t.TempDir(), "maps")
	os.WriteFile(maps, []byte(`00400000-00bdf000 r-xp 00000000 fd:00 1234                               /usr/bin/cortex-sync
00bdf000-0147f000 r--p 007df000 fd:00 1234                               /usr/bin/cortex-sync
0147f000-01501000 rw-p 0107f000 fd:00 1234                               /usr/bin/cortex-sync
01501000-035ad000 rw-p 00000000 00:00 0
7f0000000000-7f0000100000 r-xp 00000000 fd:00 99                         /usr/bin/cortex-sync-other
7f0000200000-7f0000300000 r--p 00000000 fd:00 98                         /usr/lib/my dir/cortex-sync
7fff00000000-7fff00002000 r-xp 00000000 00:00 0                          [vdso]
`), 0o600)
	got, err := readOnlyMappings(maps, "/usr/bin/cortex-sync")
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]uintptr{{0x400000, 0xbdf000}, {0xbdf000, 0x147f000}}
	if !slices.Equal(got, want) {
		t.Errorf("the code and read-only data of /usr/bin/cortex-sync: got %x, want %x", got, want)
	}
	// A path with a space; replaced on disk while it runs.
	os.WriteFile(maps, []byte("7f0000200000-7f0000300000 r--p 00000000 fd:00 98                         /usr/lib/my dir/cortex-sync (deleted)\n"), 0o600)
	if got, _ := readOnlyMappings(maps, "/usr/lib/my dir/cortex-sync"); len(got) != 1 {
		t.Errorf("a deleted executable under a path with a space: got %x, want one range", got)
	}
	os.WriteFile(maps, []byte("zz-00bdf000 r-xp 00000000 fd:00 1234 /usr/bin/cortex-sync\n"), 0o600)
	if _, err := readOnlyMappings(maps, "/usr/bin/cortex-sync"); err == nil || !strings.Contains(err.Error(), maps) {
		t.Errorf("a bad line: got %v, want an error naming %s", err, maps)
	}
}

// exeRSS is how much of a process's executable's code and read-only
// data is mapped in, of how much (kB), read from its smaps.
func exeRSS(t *testing.T, pid int) (rss, size int) {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	ours := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			ours = f[1][1] != 'w' && (strings.HasSuffix(l, " "+exe) || strings.HasSuffix(l, " "+exe+" (deleted)"))
			continue
		}
		if len(f) == 3 && ours && (f[0] == "Rss:" || f[0] == "Size:") {
			n, _ := strconv.Atoi(f[1])
			if f[0] == "Rss:" {
				rss += n
			} else {
				size += n
			}
		}
	}
	return rss, size
}

func TestReleaseExecutable(t *testing.T) {
	before, _ := exeRSS(t, os.Getpid())
	n, err := releaseExecutable()
	if err != nil {
		t.Fatal(err)
	}
	after, _ := exeRSS(t, os.Getpid())
	t.Logf("advised %d kB; the executable's RSS went from %d to %d kB", n/1024, before, after)
	if n == 0 || after > before/2 {
		t.Errorf("advised %d bytes; the executable's RSS went from %d to %d kB, want it at least halved", n, before, after)
	}
	// The code runs on, from the page cache.
	if got := fmt.Sprint(time.Duration(1500) * time.Millisecond); got != "1.5s" {
		t.Errorf("after the release: %q", got)
	}
}

// The supervisor runs with one P, and keeps little of its binary mapped
// once started: what the package inits touched (most of it) is released.
func TestSupervisorFootprint(t *testing.T) {
	state, spec := newSpec(t, "lean", "sleep", "600")
	if _, err := Run(state, spec); err != nil {
		t.Fatal(err)
	}
	st := running(t, state, "lean")
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", st.Shim.PID))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(env), "\x00"), "GOMAXPROCS=1") {
		t.Errorf("the supervisor's environment: %q, want GOMAXPROCS=1 in it", env)
	}
	// It releases the pages once its first scan is done; without that it
	// has some 85% mapped, with it some 20–30%: which 64 KB windows of the
	// test binary its code and data fall in moves with any change to the
	// package (the fault-around maps whole windows back), and under load
	// it has been seen at 36%. Less than half tells the two apart.
	var rss, size int
	deadline := time.Now().Add(10 * time.Second)
	for rss, size = exeRSS(t, st.Shim.PID); rss*2 > size; rss, size = exeRSS(t, st.Shim.PID) {
		if time.Now().After(deadline) {
			t.Fatalf("the supervisor has %d of its executable's %d kB mapped, want less than half", rss, size)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the supervisor has %d of its executable's %d kB mapped", rss, size)
}
