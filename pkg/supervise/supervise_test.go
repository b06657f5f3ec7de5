package supervise

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestNextDelay(t *testing.T) {
	lo, hi := time.Second, 5*time.Minute
	var d time.Duration
	var got []time.Duration
	for range 12 {
		d = nextDelay(d, time.Second, lo, hi)
		got = append(got, d)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("delays %v, want %v seconds", got, want)
		}
	}
	if d := nextDelay(hi, 10*time.Minute, lo, hi); d != lo {
		t.Fatalf("after ten minutes up: %s, want the delay reset to %s", d, lo)
	}
}

func TestIdentity(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	id := Of(cmd.Process.Pid)
	if !id.Alive() {
		t.Fatalf("%v: a running process is not alive", id)
	}
	// The same pid with another start time is another process: a reused
	// pid in a snapshot is never mistaken for what was recorded.
	other := Identity{PID: id.PID, Start: id.Start + 1}
	if other.Alive() {
		t.Fatal("an unrelated process with the recorded pid was taken for it")
	}
	if err := other.Signal(syscall.SIGKILL); err == nil {
		t.Fatal("a signal went to a process that is not the recorded one")
	}
	if !id.Alive() {
		t.Fatal("the signal meant for a stale identity reached the live process")
	}
	// Killed and not reaped, it lingers as a zombie: that is an exited process.
	cmd.Process.Kill()
	deadline := time.Now().Add(5 * time.Second)
	for {
		state, _, err := procStat(id.PID)
		if err == nil && state == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed child never became a zombie (state %c, %v)", state, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if id.Alive() {
		t.Fatal("a zombie was taken for a running process")
	}
	cmd.Wait()
	if Of(os.Getpid()).Start == 0 || !Self().Alive() {
		t.Fatal("Self is not alive")
	}
}
