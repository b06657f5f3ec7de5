//go:build linux

package supervise

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := Backoff{}.WithDefaults() // 10s up, 1s doubling to 1m, Failed at 5
	tests := []struct {
		ran   time.Duration
		quick int
		wait  time.Duration
		n     int
		fail  bool
	}{
		// A process that ran at least minUptime restarts at once, all reset:
		// eight minutes up, killed once, is no crash loop.
		{8 * time.Minute, 0, 0, 0, false},
		{10 * time.Second, 4, 0, 0, false},
		// Quick failures in a row back off, doubling.
		{time.Second, 0, time.Second, 1, false},
		{time.Second, 1, 2 * time.Second, 2, false},
		{time.Second, 2, 4 * time.Second, 3, false},
		{time.Second, 3, 8 * time.Second, 4, false},
		// The start limit: Failed, a final state.
		{time.Second, 4, 0, 5, true},
	}
	for _, tt := range tests {
		wait, n, fail := b.Next(tt.ran, tt.quick)
		if wait != tt.wait || n != tt.n || fail != tt.fail {
			t.Errorf("Next(%s, %d) = %s, %d, %v; want %s, %d, %v", tt.ran, tt.quick, wait, n, fail, tt.wait, tt.n, tt.fail)
		}
	}
	capped := Backoff{Delay: time.Second, MaxDelay: 5 * time.Second, StartLimit: 100}
	if wait, _, _ := capped.Next(0, 20); wait != 5*time.Second {
		t.Errorf("the delay is capped at maxRestartDelay: got %s", wait)
	}
}

func TestRestartPolicy(t *testing.T) {
	ok, bad := &Exit{Code: 0}, &Exit{Code: 3}
	if RestartPolicy("").OrDefault() != Always || !RestartPolicy("").Restarts(ok) {
		t.Error("the default policy is Always")
	}
	if OnFailure.Restarts(ok) || !OnFailure.Restarts(bad) || !OnFailure.Restarts(&Exit{Unknown: true}) {
		t.Error("OnFailure restarts after a failure only; an unknown exit counts as one")
	}
	if Never.Restarts(bad) {
		t.Error("Never restarts")
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
