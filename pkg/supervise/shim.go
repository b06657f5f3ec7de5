package supervise

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/health"
	"golang.org/x/sys/unix"
)

// RunShim is the shim's main: it reads its spec from fd 3 and supervises
// the process until told to stop, or until the restart policy says done.
func RunShim() int {
	f := os.NewFile(3, "spec")
	var spec Spec
	err := json.NewDecoder(f).Decode(&spec)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cortex-sync shim: bad spec:", err)
		return 2
	}
	// Orphans of the process come to the shim, which reaps them.
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	s := &shim{spec: spec, status: Status{Shim: Self(), Hash: spec.Hash}}
	if s.spec.BackoffMin <= 0 {
		s.spec.BackoffMin = time.Second
	}
	if s.spec.BackoffMax <= 0 {
		s.spec.BackoffMax = 5 * time.Minute
	}
	return s.run()
}

type shim struct {
	spec   Spec
	mu     sync.Mutex // guards status
	status Status
	log    *capped
	// reaping keeps the reaper, which waits for any child, away from the
	// children of exec probes: those hold it shared from start to their own
	// wait, the reaper holds it exclusive. Else the reaper could take a
	// probe's exit status and fail a healthy process's probe.
	reaping sync.RWMutex
}

func (s *shim) write() {
	s.mu.Lock()
	defer s.mu.Unlock()
	writeStatus(s.spec.StatusFile, &s.status)
}

func (s *shim) update(f func(st *Status)) {
	s.mu.Lock()
	f(&s.status)
	s.mu.Unlock()
	s.write()
}

func (s *shim) run() int {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	var err error
	if s.log, err = openCapped(s.spec.LogFile, s.spec.LogMax); err != nil {
		s.update(func(st *Status) { st.State, st.Message = Exited, "cannot open the log: "+err.Error() })
		return 1
	}
	defer s.log.Close()

	var delay time.Duration
	for {
		started := time.Now()
		exit, stopped := s.runOnce(stop, chld)
		if stopped {
			s.update(func(st *Status) { st.State, st.Ready, st.Process = Stopped, false, Identity{} })
			return 0
		}
		restart := s.spec.RestartPolicy == "Always" || (s.spec.RestartPolicy == "OnFailure" && exit.Failed())
		if !restart {
			s.update(func(st *Status) { st.State, st.Ready, st.Process, st.LastExit = Exited, false, Identity{}, exit })
			return 0
		}
		delay = nextDelay(delay, time.Since(started), s.spec.BackoffMin, s.spec.BackoffMax)
		next := time.Now().Add(delay)
		s.update(func(st *Status) {
			st.State, st.Ready, st.Process, st.LastExit, st.NextRestart = Backoff, false, Identity{}, exit, next
		})
		fmt.Fprintf(s.log, "cortex-sync: %s; restarting in %s\n", exit, delay)
		select {
		case <-time.After(delay):
		case <-stop:
			s.update(func(st *Status) { st.State = Stopped })
			return 0
		}
		s.update(func(st *Status) { st.Restarts++ })
	}
}

// runOnce starts the process and supervises it until it ends (its exit) or
// a stop is asked (stopped). One loop reaps: children and, the shim being a
// subreaper, orphans of theirs.
func (s *shim) runOnce(stop <-chan os.Signal, chld <-chan os.Signal) (*Exit, bool) {
	pid, err := s.start()
	if err != nil {
		s.update(func(st *Status) { st.Message = err.Error() })
		fmt.Fprintf(s.log, "cortex-sync: cannot start: %v\n", err)
		return &Exit{Code: -1, Reason: "cannot start: " + err.Error(), Time: time.Now()}, false
	}
	id := Of(pid)
	s.update(func(st *Status) {
		st.State, st.Process, st.Started, st.Ready, st.Message, st.NextRestart = Running, id, time.Now(), s.spec.Readiness == nil, "", time.Time{}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	unhealthy := make(chan string, 1)
	s.probe(ctx, unhealthy)

	var (
		killAt   <-chan time.Time // SIGKILL the group when the stop timeout passes
		reason   string
		stopping bool
	)
	terminate := func() {
		if killAt == nil {
			syscall.Kill(-pid, s.spec.StopSignal)
			killAt = time.After(s.spec.StopTimeout)
		}
	}
	for {
		select {
		case <-chld:
			if exit := s.reap(pid); exit != nil {
				exit.Reason = reason
				cancel()
				s.endGroup(pid, chld)
				return exit, stopping
			}
		case why := <-unhealthy:
			reason = why
			fmt.Fprintf(s.log, "cortex-sync: %s; stopping the process\n", why)
			terminate()
		case <-stop:
			stopping = true
			terminate()
		case <-killAt:
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// endGroup ends what is left of the process's group once the process
// itself has exited, as systemd does for a unit's control group: the stop
// signal, then SIGKILL after the stop timeout, reaping all the while.
func (s *shim) endGroup(pgid int, chld <-chan os.Signal) {
	if !groupAlive(pgid) {
		return
	}
	syscall.Kill(-pgid, s.spec.StopSignal)
	deadline := time.After(s.spec.StopTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for groupAlive(pgid) {
		select {
		case <-chld:
		case <-tick.C:
		case <-deadline:
			syscall.Kill(-pgid, syscall.SIGKILL)
		}
		s.reap(pgid)
	}
}

// reap collects every exited child; it returns how pid ended once it has.
func (s *shim) reap(pid int) *Exit {
	s.reaping.Lock()
	defer s.reaping.Unlock()
	var exit *Exit
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if got <= 0 || err != nil {
			return exit
		}
		if got == pid {
			exit = &Exit{Code: ws.ExitStatus(), Time: time.Now()}
			if ws.Signaled() {
				exit.Code, exit.Signal = -1, unix.SignalName(ws.Signal())
			}
		}
	}
}

// start forks the process in a group of its own, its output into the log.
func (s *shim) start() (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	attr := &syscall.SysProcAttr{Setpgid: true}
	if s.spec.UID >= 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(s.spec.UID), Gid: uint32(max(s.spec.GID, 0))}
	}
	path := s.spec.Command[0]
	if lp, err := LookPath(path, s.spec.Env); err == nil {
		path = lp
	}
	pid, err := syscall.ForkExec(path, s.spec.Command, &syscall.ProcAttr{
		Dir: s.spec.Dir, Env: s.spec.Env, Sys: attr,
		Files: []uintptr{devnull.Fd(), w.Fd(), w.Fd()},
	})
	w.Close()
	if err != nil {
		r.Close()
		return 0, fmt.Errorf("%s: %w", s.spec.Command[0], err)
	}
	go func() {
		io.Copy(s.log, r)
		r.Close()
	}()
	return pid, nil
}

// check runs a probe once; an exec probe's child is kept from the reaper.
func (s *shim) check(ctx context.Context, p *health.Probe) error {
	if p.Exec != nil {
		s.reaping.RLock()
		defer s.reaping.RUnlock()
	}
	return p.Check(ctx, s.spec.Env, s.spec.Dir)
}

// probe runs readiness and liveness checks while the process runs.
// Readiness is polled every 20ms until it first succeeds, so a fast
// process is seen ready at once, then every period.
func (s *shim) probe(ctx context.Context, unhealthy chan<- string) {
	if p := s.spec.Readiness; p != nil {
		t := p.Timing()
		go func() {
			if !sleep(ctx, t.InitialDelay) {
				return
			}
			ok, bad := 0, 0
			for ready := false; ; {
				err := s.check(ctx, p)
				if ctx.Err() != nil {
					return
				}
				if err == nil {
					ok, bad = ok+1, 0
				} else {
					ok, bad = 0, bad+1
				}
				switch {
				case !ready && ok >= t.SuccessThreshold:
					ready = true
					s.update(func(st *Status) { st.Ready, st.Message = true, "" })
				case ready && bad >= t.FailureThreshold:
					ready = false
					s.update(func(st *Status) { st.Ready, st.Message = false, "readiness probe failed: "+err.Error() })
				}
				wait := t.Period
				if !ready {
					wait = min(t.Period, 20*time.Millisecond)
				}
				if !sleep(ctx, wait) {
					return
				}
			}
		}()
	}
	if p := s.spec.Liveness; p != nil {
		t := p.Timing()
		go func() {
			if !sleep(ctx, t.InitialDelay) {
				return
			}
			bad := 0
			for {
				if !sleep(ctx, t.Period) {
					return
				}
				err := s.check(ctx, p)
				if ctx.Err() != nil {
					return
				}
				if err == nil {
					bad = 0
					continue
				}
				if bad++; bad >= t.FailureThreshold {
					unhealthy <- "liveness probe failed: " + err.Error()
					return
				}
			}
		}()
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// nextDelay is the wait before the next start: lo first, doubling up to hi
// while the process keeps failing, back to lo once it ran ten minutes.
func nextDelay(prev, ran, lo, hi time.Duration) time.Duration {
	if prev == 0 || ran >= 10*time.Minute {
		return lo
	}
	return min(2*prev, hi)
}
