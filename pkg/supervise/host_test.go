//go:build linux

package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// host makes this test process the supervisor of state, as the agent is;
// it hands over when the test ends, before the state dir's cleanup stops
// what is left.
func host(t *testing.T, state string) *Host {
	t.Helper()
	h, err := NewHost(state)
	if errors.Is(err, ErrNoContainment) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Handover() })
	return h
}

// TestHostReaping: hosted, the supervisor waits for its own children only.
// Commands run with os/exec while supervised processes keep exiting and
// being restarted: every Command gets its own exit code, and every
// process's exit is seen with its code.
func TestHostReaping(t *testing.T) {
	state, spec := newSpec(t, "crash0", "sh", "-c", "sleep 0.02; exit 3")
	host(t, state)
	spec.Backoff = Backoff{MinUptime: time.Millisecond} // every run is long enough: restarted at once
	const procs = 3
	for i := range procs {
		s := spec
		s.Name, s.ID = fmt.Sprintf("crash%d", i), fmt.Sprintf("Process/crash%d", i)
		s.LogFile, _ = Files(state, s.Name)
		if s.Cgroup != "" {
			s.Cgroup = filepath.Join(filepath.Dir(spec.Cgroup), s.Name)
		}
		st, err := Run(state, s)
		if err != nil {
			t.Fatal(err)
		}
		if st.Shim != Self() {
			t.Fatalf("%s is supervised by pid %d, not by this process (%d)", s.Name, st.Shim.PID, os.Getpid())
		}
	}
	restarts := func() (n int) {
		for i := range procs {
			if st, _ := Read(state, fmt.Sprintf("crash%d", i)); st != nil {
				n += st.Restarts
			}
		}
		return n
	}
	before := restarts()
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				want := (w+i)%5 + 1
				err := exec.Command("sh", "-c", fmt.Sprintf("exit %d", want)).Run()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != want {
					errs <- fmt.Errorf("command %d/%d: %v, want exit status %d", w, i, err, want)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Crashes kept coming while the Commands ran, and each was seen as
	// what it was: exit code 3, not an unknown end.
	eventually(t, 10*time.Second, "too few restarts", func() bool { return restarts()-before >= 2*procs })
	for i := range procs {
		st, _ := Read(state, fmt.Sprintf("crash%d", i))
		if st == nil || st.LastExit == nil || st.LastExit.Code != 3 || st.LastExit.Unknown {
			t.Errorf("crash%d: last exit %+v, want exit code 3", i, st.LastExit)
		}
	}
	if pids := withMarker(ShimArg+"\x00"+procsDir(state), ""); len(pids) > 0 {
		t.Errorf("a separate supervisor runs beside the hosted one: pids %v", pids)
	}
}

// TestHostHandover: a re-executed supervisor serving when the agent starts
// leaves its process running and the agent adopts it; hosted, a killed
// process restarts at once; at the agent's exit a re-executed supervisor
// adopts it in turn. The same process throughout, never two.
func TestHostHandover(t *testing.T) {
	state, spec := newSpec(t, "web", "sleep", "30217")
	spec.Backoff = Backoff{MinUptime: 100 * time.Millisecond}
	first, err := Run(state, spec)
	if err != nil {
		t.Fatal(err)
	}
	if first.Shim == Self() {
		t.Fatal("the first supervisor is this process")
	}
	h := host(t, state)
	if !first.Shim.WaitGone(5 * time.Second) {
		t.Errorf("the re-executed supervisor pid %d still runs beside the agent's", first.Shim.PID)
	}
	var st *Status
	eventually(t, 5*time.Second, "the agent did not take the process on", func() bool {
		st, _ = Read(state, "web")
		return st != nil && st.Shim == Self()
	})
	if st.Process != first.Process || !st.Adopted || !st.Process.Alive() {
		t.Fatalf("after the agent started: %+v, want pid %d adopted by this process", st, first.Process.PID)
	}
	if n := len(withMarker("30217", state)); n != 1 {
		t.Fatalf("%d copies run, want 1", n)
	}

	// Hosted, a death is acted on at once: the adopted process's, then
	// that of one the agent started, whose exit status it reaps.
	for round, want := range []string{"", "SIGKILL"} {
		st, _ := Read(state, "web")
		eventually(t, 5*time.Second, "uptime", func() bool { return time.Since(st.Started) > 150*time.Millisecond })
		syscall.Kill(st.Process.PID, syscall.SIGKILL)
		var now *Status
		eventually(t, 10*time.Second, "not restarted", func() bool {
			now, _ = Read(state, "web")
			return now != nil && now.State == Running && now.Process.PID != st.Process.PID && now.Process.Alive()
		})
		// At once: no backoff (how soon is BenchmarkKillToServing's figure).
		if now.QuickExits != 0 || now.LastExit == nil || now.LastExit.Signal != want || now.Shim != Self() {
			t.Errorf("round %d: %+v, want no quick failure, the last exit's signal %q, supervised by this process", round, now, want)
		}
	}

	// The agent exits: a re-executed supervisor adopts what runs.
	before, _ := Read(state, "web")
	if err := h.Handover(); err != nil {
		t.Fatal(err)
	}
	var after *Status
	eventually(t, 5*time.Second, "no supervisor took the process on", func() bool {
		after, _ = Read(state, "web")
		return after != nil && after.Shim != Self()
	})
	if after.Shim == Self() || !after.Shim.Alive() || after.Process != before.Process || !after.Adopted {
		t.Fatalf("after the handover: %+v, want pid %d adopted by a live re-executed supervisor", after, before.Process.PID)
	}
	if n := len(withMarker("30217", state)); n != 1 {
		t.Fatalf("%d copies run, want 1", n)
	}
	// It supervises: a death is acted on.
	syscall.Kill(after.Process.PID, syscall.SIGKILL)
	eventually(t, 5*time.Second, "not restarted by the re-executed supervisor", func() bool {
		st, _ := Read(state, "web")
		return st != nil && st.State == Running && st.Process.PID != after.Process.PID && st.Process.Alive() && st.Shim == after.Shim
	})
}
