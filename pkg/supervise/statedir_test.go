//go:build linux

package supervise

import (
	"bytes"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestStateDirRemoved: the state dir removed under a running supervisor
// (rm -rf; an error message that says "move it away" invites it) takes
// nothing down. The process runs on, the same pid; the next sync, at once,
// finds it supervised by the same supervisor and no second one starts; the
// procs dir, the status and the log are made again, the process's output
// reaching the new log; the supervisor says what happened once; and it
// still supervises: the process killed is restarted.
func TestStateDirRemoved(t *testing.T) {
	supervisorModes(t, func(t *testing.T, hosted bool) {
		for _, how := range []string{"moved away", "removed"} {
			t.Run(how, func(t *testing.T) { stateDirRemoved(t, hosted, how == "moved away") })
		}
	})
}

func stateDirRemoved(t *testing.T, hosted, moved bool) {
	state, spec := newSpec(t, "loop", "sh", "-c", "while :; do echo tick; sleep 0.05; done")
	if hosted {
		host(t, state)
	}
	spec.Backoff = Backoff{MinUptime: 100 * time.Millisecond}
	if _, err := Run(state, spec); err != nil {
		t.Fatal(err)
	}
	first := running(t, state, "loop")
	if moved {
		if err := os.Rename(state, state+".gone"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(state + ".gone") })
	} else {
		// rm -rf: the supervisor may make a part again while it runs,
		// which rm then removes as well (or fails on, as rm would).
		eventually(t, 10*time.Second, "the state dir could not be removed", func() bool {
			os.RemoveAll(state)
			_, err := os.Stat(state)
			return os.IsNotExist(err)
		})
	}
	// The agent's next sync finds no status and asks for the process
	// again, as soon as it can.
	st, err := Run(state, spec)
	if err != nil {
		t.Fatal(err)
	}
	if st.Process != first.Process || st.Shim != first.Shim || st.State != Running || !st.Process.Alive() {
		t.Fatalf("after the state dir was removed: %+v, want pid %d running, supervised by pid %d", st, first.Process.PID, first.Shim.PID)
	}
	if !hosted {
		// One the sync started to find none may still be on its way
		// out: it found the lock held, and leaves.
		eventually(t, 10*time.Second, "two supervisors run", func() bool {
			return len(topmost(withMarker(ShimArg+"\x00"+procsDir(state), ""))) == 1
		})
	}
	eventually(t, 10*time.Second, "the process's output never reached the new log", func() bool {
		b, _ := os.ReadFile(spec.LogFile)
		return bytes.Contains(b, []byte("tick\n"))
	})
	said := []byte("under the supervisor: made it again")
	eventually(t, 10*time.Second, "the supervisor never said the state dir was removed", func() bool {
		b, _ := os.ReadFile(supervisorLog(state))
		return bytes.Contains(b, said)
	})
	if b, _ := os.ReadFile(supervisorLog(state)); moved && bytes.Count(b, said) != 1 {
		t.Errorf("the supervisor's log says it more than once:\n%s", b)
	}
	// Still supervised.
	syscall.Kill(first.Process.PID, syscall.SIGKILL)
	again := replaced(t, state, "loop", first.Process)
	stays(t, state, "loop", again, time.Second)
	if again.Shim != first.Shim {
		t.Errorf("restarted by pid %d, not by its supervisor pid %d", again.Shim.PID, first.Shim.PID)
	}
}
