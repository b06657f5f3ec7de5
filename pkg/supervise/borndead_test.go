//go:build linux

package supervise

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// refuseMarked makes the kernel refuse the cgroup of a process's next
// runs, as many as the file refuse-<name> in its state dir says: it
// writes cgroup.kill to the fresh, empty cgroup, which on Linux 6.18 kills
// at once whatever is started into it. (Set in TestMain, so both the
// hosted supervisor and the re-executed one, this binary, have it.)
func refuseMarked(spec *Spec, run cgroup) {
	mark := filepath.Join(filepath.Dir(filepath.Dir(spec.LogFile)), "refuse-"+spec.Name)
	b, err := os.ReadFile(mark)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return
	}
	os.WriteFile(mark, []byte(strconv.Itoa(n-1)), 0o644)
	os.WriteFile(filepath.Join(string(run), "cgroup.kill"), []byte("1"), 0o644)
}

// refuses tells whether this kernel kills a child started into a cgroup
// that was killed (Linux 6.18 does): the ground the tests of the safety net
// stand on.
func refuses(t *testing.T, state string, spec Spec) bool {
	t.Helper()
	run, err := cgroup(spec.Cgroup).newRun()
	if err != nil {
		t.Fatal(err)
	}
	defer cgroup(spec.Cgroup).remove()
	os.WriteFile(filepath.Join(string(run), "cgroup.kill"), []byte("1"), 0o644)
	r := newReaper(false)
	fd, err := run.open()
	if err != nil {
		t.Fatal(err)
	}
	attr := procAttr(&spec, []uintptr{0, 1, 2})
	attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, fd
	_, exited, err := r.forkExec("/bin/sh", []string{"sh", "-c", "exit 0"}, attr)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	var w waited
	eventually(t, 10*time.Second, "the probe never ended", func() bool {
		r.reap()
		select {
		case w = <-exited:
			return true
		default:
			return false
		}
	})
	return w.ws.Signaled()
}

// TestBornDead: a process the kernel kills before it runs its program, in
// a cgroup, is started once more in a fresh cgroup before its end counts,
// and the log says so; a second such death is a quick failure like any
// other, whose reason says it, and the next start after the backoff runs.
func TestBornDead(t *testing.T) {
	supervisorModes(t, func(t *testing.T, hosted bool) {
		for _, refused := range []int{1, 2} {
			t.Run(strconv.Itoa(refused), func(t *testing.T) {
				state, spec := newSpec(t, "fragile", "sleep", "3061")
				if spec.Cgroup == "" {
					t.Skip("no writable cgroup v2 hierarchy here")
				}
				if !refuses(t, state, spec) {
					t.Skip("this kernel starts a child into a cgroup that was killed: nothing to retry")
				}
				if hosted {
					host(t, state)
				}
				spec.Backoff = Backoff{Delay: 100 * time.Millisecond}
				os.WriteFile(filepath.Join(state, "refuse-fragile"), []byte(strconv.Itoa(refused)), 0o644)
				if _, err := Run(state, spec); err != nil {
					t.Fatal(err)
				}
				// (A start the kernel kills may show as running for a
				// moment: its SIGKILL is acted on once it is scheduled.)
				var st *Status
				eventually(t, 30*time.Second, "fragile never ran for 1s", func() bool {
					st, _ = Read(state, "fragile")
					return st != nil && st.State == Running && st.Process.Alive() && time.Since(st.Started) >= time.Second
				})
				log, _ := os.ReadFile(spec.LogFile)
				if n := bytes.Count(log, []byte("killed by SIGKILL before it ran its program, in "+spec.Cgroup+"/")); n != 1 {
					t.Errorf("the log says %d times that a start was retried in a fresh cgroup, want once:\n%s", n, log)
				}
				if n := bytes.Count(log, []byte("started pid")); n != refused+1 {
					t.Errorf("%d starts, want %d:\n%s", n, refused+1, log)
				}
				switch refused {
				case 1:
					if st.QuickExits != 0 || st.Restarts != 0 || st.LastExit != nil {
						t.Errorf("the retry counted: %+v", st)
					}
				case 2:
					if st.Restarts != 1 || st.LastExit == nil || st.LastExit.Reason != "before it ran its program" {
						t.Errorf("the second death: %+v, last exit %+v; want a restart after it, its reason said", st, st.LastExit)
					}
				}
			})
		}
	})
}
