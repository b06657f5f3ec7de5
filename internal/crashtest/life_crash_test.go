//go:build crash

package crashtest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/internal/syncbuf"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// TestCrashRevisionSteps kills each caller of a revision's life at each of
// its steps — exactly there, by CORTEX_SYNC_KILL_AT in a build with -tags
// crash (pkg/reconcile/killpoint_crash.go) — and checks that the next run,
// an agent or a sync --wait, converges the same way whichever caller was
// killed: a bad revision ends judged bad, refused, the host on the last
// good one and held there; a rollback by hand killed before its record
// leaves the host where it was, and after it is finished.
func TestCrashRevisionSteps(t *testing.T) {
	for _, caller := range []string{"agent", "sync"} {
		for _, step := range []string{"trial-saved", "verdict-loaded", "verdict-recorded"} {
			for _, next := range []string{"agent", "sync"} {
				t.Run(caller+"-killed-at-"+step+"-then-"+next, func(t *testing.T) {
					s, good, bad := newLifeSandbox(t)
					s.killedAt(step, caller)
					s.next(next, heldOnRollback(good))
					s.heldOn(good, bad, false)
				})
			}
		}
	}
	for _, step := range []string{"rollback-loaded", "rollback-recorded"} {
		for _, next := range []string{"agent", "sync"} {
			t.Run("rollback-killed-at-"+step+"-then-"+next, func(t *testing.T) {
				s, good, newer := newLifeSandbox(t)
				s.repoCommit("newer", lkgFiles("version newer\n", true, "a.md"))
				newer = s.head()
				s.mustRun("sync", "--wait", "--min-ready", "300ms", "--wait-timeout", "20s")
				s.killedAt(step, "rollback", "--to", good)
				if step == "rollback-loaded" {
					s.next(next, on(newer, "version newer\n"))
					s.on(newer, "version newer\n") // nothing was recorded: no rollback
					return
				}
				s.next(next, heldOnRollback(good))
				s.heldOn(good, newer, true)
			})
		}
	}
}

// lifeSandbox is a sandbox on a Git repository, its first revision good.
type lifeSandbox struct {
	*sandbox
	repo *gittest.Repo
}

// newLifeSandbox applies a good revision, judged so, and commits a bad one
// (its process never gets ready), not applied yet.
func newLifeSandbox(t *testing.T) (s *lifeSandbox, good, bad string) {
	s = &lifeSandbox{sandbox: newSandbox(t), repo: gittest.NewRepo(t)}
	url, _ := s.repo.Daemon(t)
	s.src = []string{"--repo", url, "--branch", "main"}
	t.Cleanup(func() { supervise.StopAll(s.State) })
	s.repoCommit("good", lkgFiles("version good\n", true, "a.md"))
	good = s.head()
	s.mustRun("sync", "--wait", "--min-ready", "300ms", "--wait-timeout", "20s")
	s.repoCommit("bad", lkgFiles("version bad\n", false, "a.md", "b.md"))
	return s, good, s.head()
}

func (s *lifeSandbox) repoCommit(msg string, files map[string]*string) { s.repo.Commit(msg, files) }
func (s *lifeSandbox) head() string                                    { return "main@sha1:" + s.repo.Head() }

// killedAt runs caller (the agent, sync --wait --rollback-on-failure, or
// the verb given) until it kills itself at step; it fails the test when
// the caller ended otherwise (the step was not reached).
func (s *lifeSandbox) killedAt(step, caller string, args ...string) {
	s.t.Helper()
	var cmd *exec.Cmd
	switch caller {
	case "agent":
		cmd = s.command("run", "--prune", "--interval", "1h", "--drift-interval", "1h", "--listen", "127.0.0.1:0",
			"--min-ready", "300ms", "--progress-deadline", "2s")
	case "sync":
		cmd = s.command("sync", "--prune", "--wait", "--rollback-on-failure", "--min-ready", "300ms", "--wait-timeout", "2s")
	default:
		cmd = s.command(caller, args...)
	}
	cmd.Env = append(os.Environ(), "CORTEX_SYNC_KILL_AT="+step)
	out, err := runFor(cmd, time.Minute)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		s.t.Fatalf("%s did not die at %s (%v):\n%s", caller, step, err, tail(out, 30))
	}
}

// runFor runs cmd, killing it after limit.
func runFor(cmd *exec.Cmd, limit time.Duration) (string, error) {
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	t := time.AfterFunc(limit, func() { cmd.Process.Signal(syscall.SIGTERM) })
	defer t.Stop()
	err := cmd.Wait()
	return out.String(), err
}

// next runs what comes after the kill: an agent, until done says the host
// is where it should be; or a sync --wait --rollback-on-failure, as from
// cron (its exit code is not judged: it says 1 for a bad revision it
// rolled back).
func (s *lifeSandbox) next(what string, done func(st *lkgStatus, conf string) bool) {
	s.t.Helper()
	if what == "sync" {
		s.run("sync", "--prune", "--wait", "--rollback-on-failure", "--min-ready", "300ms", "--wait-timeout", "2s")
		return
	}
	a := s.startLKG(2 * time.Second)
	s.waitLKG(a, "converged after the kill", func(st *lkgStatus) bool {
		conf, _ := os.ReadFile(filepath.Join(s.Root, "etc/app.conf"))
		return st.healthy("Process/web") && done(st, string(conf))
	})
	a.kill()
}

// heldOnRollback: the host is on good, held there by a rollback, serving
// its file.
func heldOnRollback(good string) func(*lkgStatus, string) bool {
	return func(st *lkgStatus, conf string) bool {
		return st.OnRollback != nil && st.OnRollback.Revision == good && st.Revision == good && conf == "version good\n"
	}
}

// on: the host is on rev, its file holding conf.
func on(rev, conf string) func(*lkgStatus, string) bool {
	return func(st *lkgStatus, c string) bool { return st.Revision == rev && c == conf }
}

// heldOn checks the host is on good, held there from from (by hand, or
// automatically with from refused and judged bad).
func (s *lifeSandbox) heldOn(good, from string, manual bool) {
	s.t.Helper()
	s.on(good, "version good\n")
	snap, err := s.loads()
	if err != nil {
		s.t.Fatal(err)
	}
	if p := snap.Pin; p == nil || p.Revision != good || p.Head != from || p.Manual != manual {
		s.t.Fatalf("pin %+v, want on %s from %s (manual %v)", p, good, from, manual)
	}
	if manual {
		return
	}
	if a := snap.Latest(from); a == nil || a.Verdict != state.Bad || !a.Refused || a.RolledBackTo != good {
		s.t.Fatalf("the bad revision's history: %+v", a)
	}
	if tr := snap.Trial(); tr != nil {
		s.t.Fatalf("still on trial: %+v", tr)
	}
}

// on checks the host is on rev, its file holding conf.
func (s *lifeSandbox) on(rev, conf string) {
	s.t.Helper()
	snap, err := s.loads()
	if err != nil {
		s.t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(s.Root, "etc/app.conf"))
	if snap.Revision != rev || string(b) != conf {
		s.t.Fatalf("on %s with /etc/app.conf %q, want %s with %q", snap.Revision, b, rev, conf)
	}
	if left := append(temps(s.Root), temps(filepath.Join(s.State, "trees"))...); len(left) > 0 {
		s.t.Fatalf("temp files left: %v", left)
	}
}
