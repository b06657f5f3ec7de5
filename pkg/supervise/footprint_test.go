//go:build linux

package supervise

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

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
