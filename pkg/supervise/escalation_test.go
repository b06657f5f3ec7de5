//go:build linux

package supervise

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// stubborn ignores SIGTERM, once it has said "trapped": only the SIGKILL
// that follows stopTimeout (cgroup.kill, with a cgroup) stops it.
var stubborn = []string{"sh", "-c", `trap "" TERM; echo trapped; while :; do sleep 1; done`}

// trapped waits until the stubborn process has said it ignores SIGTERM.
func trapped(t *testing.T, spec Spec) {
	t.Helper()
	eventually(t, 10*time.Second, "the stubborn process never set its trap", func() bool {
		b, _ := os.ReadFile(spec.LogFile)
		return strings.Contains(string(b), "trapped\n")
	})
}

// replaced waits until name runs as another process than old, alive.
func replaced(t *testing.T, state, name string, old Identity) *Status {
	t.Helper()
	var st *Status
	eventually(t, 15*time.Second, name+" was not started again", func() bool {
		st, _ = Read(state, name)
		return st != nil && st.State == Running && st.Process != old && st.Process.Alive()
	})
	return st
}

// stays checks that the process st names keeps running until it has been
// up for d: a start that dies at once, or soon, fails it.
func stays(t *testing.T, state, name string, st *Status, d time.Duration) {
	t.Helper()
	eventually(t, d+15*time.Second, name+" never ran for "+d.String(), func() bool {
		now, _ := Read(state, name)
		if now == nil || now.Process != st.Process || !st.Process.Alive() {
			log, _ := os.ReadFile(filepath.Join(state, "logs", name+".log"))
			t.Fatalf("pid %d did not keep running: now %+v\n%s", st.Process.PID, now, log)
		}
		return time.Since(now.Started) >= d
	})
}

// supervisorModes runs a test under each supervisor: the re-executed one
// a starter brings up, and one hosted in this process, as the agent's is.
func supervisorModes(t *testing.T, f func(t *testing.T, hosted bool)) {
	for _, mode := range []string{"re-executed", "hosted"} {
		t.Run(mode, func(t *testing.T) { f(t, mode == "hosted") })
	}
}

// TestKilledStartsAgain: a process that ignores SIGTERM is stopped by
// SIGKILL to its whole cgroup once stopTimeout has passed. Whatever
// stopped it — a restart, a stop then a start, a spec change (a
// restartOn), its liveness probe, a prune then a new sync — it starts
// again and keeps running: the kernel kills a child started into a cgroup
// that cgroup.kill was written to, so such a cgroup is never used again.
func TestKilledStartsAgain(t *testing.T) {
	triggers := []struct {
		name string
		stop func(t *testing.T, state string, spec Spec)
	}{
		{"restart", func(t *testing.T, state string, spec Spec) {
			if _, err := Restart(state, spec.Name); err != nil {
				t.Fatal(err)
			}
		}},
		{"stop and start", func(t *testing.T, state string, spec Spec) {
			st, err := Hold(state, spec.Name)
			if err != nil {
				t.Fatal(err)
			}
			if st.State != Held || st.LastExit == nil || st.LastExit.Signal != "SIGKILL" {
				t.Fatalf("after the stop: %+v, want held, last killed by SIGKILL", st)
			}
			if _, err := Release(state, spec.Name); err != nil {
				t.Fatal(err)
			}
		}},
		{"spec change", func(t *testing.T, state string, spec Spec) {
			spec.Hash = "h2" // a restartOn target changed
			if _, err := Run(state, spec); err != nil {
				t.Fatal(err)
			}
		}},
		{"liveness", func(t *testing.T, state string, spec Spec) {
			sick := filepath.Join(state, "sick")
			os.WriteFile(sick, nil, 0o644)
			eventually(t, 15*time.Second, "never stopped for its liveness", func() bool {
				st, _ := Read(state, spec.Name)
				return st != nil && st.LastExit != nil && st.LastExit.Liveness
			})
			os.Remove(sick)
		}},
		{"prune and sync", func(t *testing.T, state string, spec Spec) {
			if err := Remove(state, spec.Name, spec.StopSignal, spec.StopTimeout); err != nil {
				t.Fatal(err)
			}
			if _, err := Run(state, spec); err != nil {
				t.Fatal(err)
			}
		}},
	}
	supervisorModes(t, func(t *testing.T, hosted bool) {
		for _, tr := range triggers {
			t.Run(tr.name, func(t *testing.T) {
				state, spec := newSpec(t, "stubborn", stubborn...)
				if spec.Cgroup == "" {
					t.Skip("no writable cgroup v2 hierarchy here: nothing is killed by cgroup.kill")
				}
				if hosted {
					host(t, state)
				}
				spec.StopTimeout = 300 * time.Millisecond
				spec.Backoff = Backoff{MinUptime: 100 * time.Millisecond}
				// Sick while the file exists; a new run gets 3s first.
				spec.Liveness = &health.Probe{
					Exec:         &health.ExecProbe{Command: []string{"test", "!", "-e", filepath.Join(state, "sick")}},
					InitialDelay: resource.Duration(3 * time.Second), Period: resource.Duration(50 * time.Millisecond), FailureThreshold: 2,
				}
				if _, err := Run(state, spec); err != nil {
					t.Fatal(err)
				}
				first := running(t, state, spec.Name)
				trapped(t, spec)
				tr.stop(t, state, spec)
				st := replaced(t, state, spec.Name, first.Process)
				stays(t, state, spec.Name, st, 2*time.Second)
				if tr.name == "prune and sync" {
					return
				}
				if st.LastExit == nil || st.LastExit.Signal != "SIGKILL" {
					t.Errorf("last exit %+v, want the stop's SIGKILL", st.LastExit)
				}
				log, _ := os.ReadFile(spec.LogFile)
				if strings.Count(string(log), "started pid") != 2 {
					t.Errorf("want two starts in the log, one before the stop and one after:\n%s", log)
				}
			})
		}
	})
}

// TestLivenessKillServesAgain: a server that stops answering (SIGSTOP:
// it cannot even take SIGTERM) is stopped by its liveness probe, killed
// with its cgroup after stopTimeout, and serves again within 20s, and
// keeps serving.
func TestLivenessKillServesAgain(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found")
	}
	supervisorModes(t, func(t *testing.T, hosted bool) {
		port := freePort(t)
		state, spec := newSpec(t, "web", "python3", "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1")
		if hosted {
			host(t, state)
		}
		spec.Dir = t.TempDir()
		os.WriteFile(filepath.Join(spec.Dir, "hello.txt"), []byte("hello\n"), 0o644)
		url := fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port)
		spec.StopTimeout = 500 * time.Millisecond
		spec.Backoff = Backoff{MinUptime: 100 * time.Millisecond}
		spec.Liveness = &health.Probe{
			HTTP:         &health.HTTPProbe{URL: url},
			InitialDelay: resource.Duration(3 * time.Second), Period: resource.Duration(200 * time.Millisecond),
			Timeout: resource.Duration(200 * time.Millisecond), FailureThreshold: 3,
		}
		if _, err := Run(state, spec); err != nil {
			t.Fatal(err)
		}
		get := func() error { return httpOK(url) }
		eventually(t, 20*time.Second, "the server never answered", func() bool { return get() == nil })
		first := running(t, state, "web")
		syscall.Kill(first.Process.PID, syscall.SIGSTOP)
		st := replaced(t, state, "web", first.Process)
		if st.LastExit == nil || !st.LastExit.Liveness || st.LastExit.Signal != "SIGKILL" {
			t.Errorf("last exit %+v, want killed by SIGKILL for its liveness", st.LastExit)
		}
		eventually(t, 20*time.Second, "the server never answered again", func() bool { return get() == nil })
		// It keeps serving, the same process, past its liveness probe's
		// first checks.
		served := time.Now()
		eventually(t, 30*time.Second, "the server never served for 5s", func() bool {
			if err := get(); err != nil {
				t.Fatalf("the server stopped serving again: %v", err)
			}
			return time.Since(served) > 5*time.Second
		})
		stays(t, state, "web", st, 5*time.Second)
	})
}

// TestStatusNamesNoDeadProcess: once the supervisor has seen a process
// end, its status never says it runs: a status read between the exit and
// the next start said "running as pid N" of the dead pid (and a verb
// printed it).
func TestStatusNamesNoDeadProcess(t *testing.T) {
	state, spec := newSpec(t, "flap", "sh", "-c", "exit 3")
	spec.Backoff = Backoff{MinUptime: time.Nanosecond} // every run long enough: restarted at once
	if _, err := Run(state, spec); err != nil {
		t.Fatal(err)
	}
	file := statusFile(procsDir(state), "flap")
	deadline := time.Now().Add(60 * time.Second)
	for seen := 0; seen < 200; {
		if time.Now().After(deadline) {
			t.Fatalf("%d restarts in 60s, want 200", seen)
		}
		st, err := ReadStatus(file)
		if err != nil || st == nil {
			continue // between the write and the rename of another
		}
		if st.State == Running && st.LastExit != nil && st.LastExit.Time.After(st.Started) {
			t.Fatalf("the status says pid %d runs, started %s, after the exit it records at %s", st.Process.PID, st.Started, st.LastExit.Time)
		}
		seen = st.Restarts
	}
}
