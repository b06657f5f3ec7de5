//go:build crash

package crashtest

import (
	"math/rand/v2"
	"net/http"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/syncbuf"
)

// agentProc is a running `cortex-sync run`.
type agentProc struct {
	t     testing.TB
	cmd   *exec.Cmd
	out   *syncbuf.Buffer
	done  chan error
	addr  string // where it listens, once known
	start time.Time
}

// startAgent starts the agent over the sandbox's source, pruning, with
// polls and drift scans an hour apart: what it does is the start-up
// reconcile, the one a crash interrupts.
func (s *sandbox) startAgent() *agentProc {
	s.t.Helper()
	cmd := s.command("run", "--prune", "--interval", "1h", "--drift-interval", "1h", "--listen", "127.0.0.1:0", "--log-level", "info")
	a := &agentProc{t: s.t, cmd: cmd, out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = a.out, a.out
	a.start = time.Now()
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { a.done <- cmd.Wait() }()
	return a
}

var listenLine = regexp.MustCompile(`msg="agent started" listen=(\S+)`)

// ready reports whether the agent answers /readyz with 200: its first
// reconcile is done and the snapshot saved.
func (a *agentProc) ready(client *http.Client) bool {
	if a.addr == "" {
		m := listenLine.FindStringSubmatch(a.out.String())
		if m == nil {
			return false
		}
		a.addr = m[1]
	}
	resp, err := client.Get("http://" + a.addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

var readyClient = &http.Client{Timeout: 2 * time.Second}

// waitReady waits up to limit for the agent to be ready.
func (a *agentProc) waitReady(limit time.Duration) {
	a.t.Helper()
	for deadline := time.Now().Add(limit); !a.ready(readyClient); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-a.done:
			a.t.Fatalf("the agent exited (%v) before it was ready:\n%s", err, tail(a.out.String(), 30))
		default:
		}
		if time.Now().After(deadline) {
			a.kill()
			a.t.Fatalf("the agent was not ready within %s:\n%s", limit, tail(a.out.String(), 30))
		}
	}
}

// killAt SIGKILLs the agent d after its start, unless it is ready before:
// then it is killed at once. It reports whether the kill came before the
// agent was ready (mid-apply), and when the agent was ready otherwise.
func (a *agentProc) killAt(d time.Duration) (midRun bool, readyAfter time.Duration) {
	a.t.Helper()
	at := a.start.Add(d)
	for time.Now().Before(at) {
		if a.ready(readyClient) {
			readyAfter = time.Since(a.start)
			a.kill()
			return false, readyAfter
		}
		time.Sleep(min(20*time.Millisecond, time.Until(at)))
	}
	a.kill()
	return true, 0
}

func (a *agentProc) kill() {
	a.cmd.Process.Kill()
	<-a.done
}

// stop ends the agent with SIGTERM, as systemd does: it must save and exit 0.
func (a *agentProc) stop() {
	a.t.Helper()
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-a.done:
		if err != nil {
			a.t.Errorf("the agent exited with %v after SIGTERM:\n%s", err, tail(a.out.String(), 20))
		}
	case <-time.After(2 * time.Minute):
		a.kill()
		a.t.Fatalf("the agent did not exit within 2m of SIGTERM:\n%s", tail(a.out.String(), 20))
	}
}

// convergeLimit bounds a restarted agent's wait to be ready: generous, as
// the machine is shared.
const convergeLimit = 5 * time.Minute

// crashAgent kills agents applying updates between v1 and v2, both ways,
// at seeded moments of their start-up reconcile. After each kill the host
// is checked as after a killed sync; then a restarted agent must converge
// it by itself, and after it stops, everything afterSync checks holds.
func crashAgent(t *testing.T, s *sandbox, v1, v2 *version) {
	rng := rand.New(rand.NewPCG(*seed, 4))
	var tl tally
	s.reset()
	s.point(v1.repo)
	s.mustRun("sync", "--prune")
	s.point(v2.repo)
	a := s.startAgent()
	a.waitReady(convergeLimit)
	full := time.Since(a.start)
	a.stop()
	afterSync(t, s, v2, nil, &tl)
	t.Logf("an agent applying the update is ready after %s", full.Round(time.Millisecond))
	midApply := 0 // kills that left some changed files new and some old
	cur, next := v2, v1
	for i := 0; more(tl); i++ {
		s.point(next.repo)
		d := killDelay(rng, full)
		a := s.startAgent()
		killed, readyAfter := a.killAt(d)
		tl.kills++
		if killed {
			tl.midRun++
		} else {
			full = readyAfter // ready before its kill: the new measure
		}
		files := afterKill(t, s, cur, next, nil, &tl)
		if applied, left := progress(files, cur, next); applied > 0 && left > 0 {
			midApply++
		}
		a = s.startAgent()
		a.waitReady(convergeLimit)
		a.stop()
		afterSync(t, s, next, nil, &tl)
		if t.Failed() {
			t.Fatalf("agent kill %d at %s (%s to %s) broke an invariant (seed %d)", i, d, cur.name, next.name, *seed)
		}
		cur, next = next, cur
	}
	pruneEverything(t, s)
	if tl.midRun < *kills {
		t.Errorf("only %d of %d kills landed before the agent was ready", tl.midRun, tl.kills)
	}
	t.Logf("agent: %s; %d kills caught the host half-updated", tl, midApply)
}

// progress counts, of the paths whose content differs between from and
// to, how many the host holds as in to (applied) and how many as in from
// (left).
func progress(files map[string]string, from, to *version) (applied, left int) {
	paths := map[string]bool{}
	for p := range from.host {
		paths[p] = true
	}
	for p := range to.host {
		paths[p] = true
	}
	for p := range paths {
		old, hadOld := from.host[p]
		neu, hasNew := to.host[p]
		if hadOld && hasNew && old == neu {
			continue
		}
		got, present := files[p]
		switch {
		case hasNew && present && got == neu, !hasNew && !present:
			applied++
		default:
			left++
		}
	}
	return applied, left
}

func TestCrashAgentDirectory(t *testing.T) {
	work := t.TempDir()
	crashAgent(t, newSandbox(t), dirVersion(t, work, 1, *dirFiles), dirVersion(t, work, 2, *dirFiles))
}

func TestCrashAgentFiles(t *testing.T) {
	work := t.TempDir()
	crashAgent(t, newSandbox(t), filesVersion(t, work, 1, *fileCount), filesVersion(t, work, 2, *fileCount))
}

func TestCrashAgentDirectoryGenerations(t *testing.T) {
	s := newSandbox(t)
	crashGenerations(t, s, func(d time.Duration) (bool, time.Duration) {
		a := s.startAgent()
		if d < convergeLimit {
			return a.killAt(d)
		}
		a.waitReady(convergeLimit)
		took := time.Since(a.start)
		a.stop()
		return false, took
	})
}
