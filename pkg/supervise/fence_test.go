//go:build linux

package supervise

import (
	"os"
	"strings"
	"testing"
	"time"
)

// writeFence writes name's fence as the holder's agent does: valid for
// valid from now, gone by killBy from now.
func writeFence(t testing.TB, state, name string, valid, killBy time.Duration, holder string) Fence {
	t.Helper()
	now := BootTime()
	f := Fence{Boot: BootID(), Deadline: now + valid, KillBy: now + killBy, Holder: holder}
	if err := os.MkdirAll(state+"/procs", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(state+"/"+FenceFile(name), f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSingletonFence: a singleton runs only while its fence is valid; it
// waits in standby without one, starts once one is written, keeps running
// while it is renewed, and is stopped — SIGKILLed, as it ignores its stop
// signal — by the fence's KillBy when the renewals stop, as when its
// agent was SIGKILLed. A stop at the fence is no failure: it starts again
// when the fence is valid again.
func TestSingletonFence(t *testing.T) {
	state, spec := newSpec(t, "single", "sh", "-c", `trap "" TERM; while :; do sleep 0.05; done`)
	spec.Singleton, spec.StopTimeout = true, 30*time.Second
	st, err := Run(state, spec)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != Standby || !st.NoFence || st.Process.PID != 0 {
		t.Fatalf("without a fence: %+v; want standby, no fence, nothing running", st)
	}
	if !strings.Contains(st.Message, "no agent of a fleet") {
		t.Errorf("standby says %q; want why (no agent of a fleet)", st.Message)
	}

	// Another host holds it: standby, naming it.
	if err := writeJSON(state+"/"+FenceFile("single"), Fence{Boot: BootID(), Holder: "h3", Note: "held by h3"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "standby naming the holder", func() bool {
		st, _ = Read(state, "single")
		return st.State == Standby && st.Holder == "h3" && !st.NoFence
	})

	writeFence(t, state, "single", time.Second, 1500*time.Millisecond, "h1")
	st = running(t, state, "single")
	pid := st.Process.PID
	// Renewed: it runs on, the same process.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		writeFence(t, state, "single", time.Second, 1500*time.Millisecond, "h1")
	}
	if st, _ = Read(state, "single"); st.Process.PID != pid || st.State != Running {
		t.Fatalf("renewed, it should run on as pid %d: %+v", pid, st)
	}

	// No renewal: gone by KillBy, before the lease it stands for expires.
	f := writeFence(t, state, "single", 300*time.Millisecond, 800*time.Millisecond, "h1")
	expiry := f.Deadline + time.Second // what the holder's lease allows at least
	eventually(t, 10*time.Second, "the singleton stopped at its fence", func() bool {
		st, _ = Read(state, "single")
		return st.State == Standby && !Of(pid).Alive()
	})
	if gone := BootTime(); gone > expiry {
		t.Errorf("stopped %s after its fence's deadline: past the lease's expiry (%s after it)", gone-f.Deadline, expiry-f.Deadline)
	}
	if e := st.LastExit; e == nil || e.Signal != "SIGKILL" || !strings.Contains(e.Reason, "fence") {
		t.Errorf("last exit %+v; want SIGKILL at its fence (it ignores SIGTERM)", e)
	}
	if st.QuickExits != 0 || st.Restarts != 0 {
		t.Errorf("a stop at the fence is no failure: %d quick exits, %d restarts", st.QuickExits, st.Restarts)
	}

	// Valid again (this host holds it again): it starts again.
	writeFence(t, state, "single", 5*time.Second, 6*time.Second, "h1")
	st = running(t, state, "single")
	if st.Process.PID == pid {
		t.Error("a new process was expected")
	}
}

// TestSingletonCrashRestart: a singleton that crashes while its fence is
// valid is restarted like any process: a crash restart is never gated.
func TestSingletonCrashRestart(t *testing.T) {
	state, spec := newSpec(t, "crashy", "sh", "-c", "sleep 60")
	spec.Singleton = true
	writeFence(t, state, "crashy", time.Minute, time.Minute+time.Second, "h1")
	if _, err := Run(state, spec); err != nil {
		t.Fatal(err)
	}
	st := running(t, state, "crashy")
	st.Process.Signal(9)
	eventually(t, 10*time.Second, "restarted after a crash", func() bool {
		n, _ := Read(state, "crashy")
		return n != nil && n.State == Running && n.Process.Alive() && n.Process.PID != st.Process.PID && n.Restarts == 1
	})
}
