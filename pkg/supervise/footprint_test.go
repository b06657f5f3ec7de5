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
func exeRSS(t testing.TB, pid int) (rss, size int) {
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

// TestSupervisorOneP: the supervisor runs with one P from its first
// instruction (its environment says so; see footprint.go).
func TestSupervisorOneP(t *testing.T) {
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
}

// BenchmarkSupervisorExecutableMapped reports how much of its executable
// (this test binary) the supervisor of one process keeps mapped once it
// has released the pages its package inits touched: the least seen over
// its first 2s (some 85% without the release, 20-30% with it, up to 36%
// seen under load; which 64 KB windows its code falls in moves with every
// change to the package). A figure, not a test: page residency depends on
// the load and the layout.
func BenchmarkSupervisorExecutableMapped(b *testing.B) {
	for b.Loop() {
		state, spec := newSpec(b, "lean", "sleep", "600")
		if _, err := Run(state, spec); err != nil {
			b.Fatal(err)
		}
		st := running(b, state, "lean")
		least, size := exeRSS(b, st.Shim.PID)
		for until := time.Now().Add(2 * time.Second); time.Now().Before(until); time.Sleep(10 * time.Millisecond) {
			if rss, _ := exeRSS(b, st.Shim.PID); rss < least {
				least = rss
			}
		}
		b.ReportMetric(float64(least), "exe-kB-mapped")
		b.ReportMetric(float64(size), "exe-kB")
		b.ReportMetric(100*float64(least)/float64(size), "exe-%-mapped")
		StopAll(state)
	}
}
