//go:build linux

package supervise

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// One run of a unit's process: take over what a predecessor left, start,
// watch, stop (the stop signal, then SIGKILL to the whole tree) and clean
// up after it.

// takeOver deals with what a predecessor left running: the process it
// recorded is adopted when adopt allows and it still runs; else it, its
// cgroup and any stray of its tree are stopped. Nothing that ran for this
// name is ever left beside what this unit starts.
func (u *unit) takeOver(prev *Status, adopt bool) bool {
	spec := u.spec
	if prev != nil && prev.Process.Alive() {
		if adopt {
			gone, unwatch, err := prev.Process.watch()
			if err == nil {
				u.proc, u.gone, u.unwatch = prev.Process, gone, unwatch
				if prev.Cgroup != string(u.cg) {
					// It stays where it runs.
					u.cg = cgroup(prev.Cgroup)
					u.fillContainment()
				}
				started := prev.Started
				if started.IsZero() {
					started = prev.Process.StartTime()
				}
				u.update(func(st *Status) {
					st.State, st.Process, st.Started, st.Adopted, st.Cgroup = Running, prev.Process, started, true, prev.Cgroup
					st.Ready = spec.Readiness == nil
				})
				u.startProbes()
				return true
			}
		}
		sig, timeout := prev.stopSignal(spec)
		u.logf("%s: stopping pid %d left by an earlier supervisor", u.name, prev.Process.PID)
		stopTree(prev.Process, cgroup(prev.Cgroup), spec.Tag(), sig, timeout, nil)
	}
	if prev != nil && prev.Cgroup != "" && prev.Cgroup != string(u.cg) {
		cgroup(prev.Cgroup).kill(5 * time.Second)
		cgroup(prev.Cgroup).remove()
	}
	if u.cg != "" {
		if u.cg.populated() {
			u.logf("%s: killing what is left in %s", u.name, u.cg)
			u.cg.kill(5 * time.Second)
		}
		u.cg.removeRuns()
	} else if pids := strays(spec.Tag()); len(pids) > 0 {
		u.logf("%s: killing %d processes left of an earlier run", u.name, len(pids))
		killStrays(spec.Tag(), 5*time.Second)
	}
	return false
}

// stopSignal is how to stop the process a status records.
func (st *Status) stopSignal(spec *Spec) (syscall.Signal, time.Duration) {
	sig, timeout := spec.StopSignal, spec.StopTimeout
	if st.StopSignal != 0 {
		sig, timeout = st.StopSignal, st.StopTimeout
	}
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return sig, timeout
}

// start forks the process: into its cgroup, its output straight into its
// log, its status written as Starting before and Running after.
func (u *unit) start() error {
	spec := u.spec
	path, err := LookPath(spec.Command[0], spec.Env)
	if err != nil {
		return fmt.Errorf("%s: not found in PATH %s", spec.Command[0], envPath(spec.Env))
	}
	secrets, err := loadSecrets(spec)
	if err != nil {
		return err
	}
	u.mu.Lock()
	u.dropOrphan() // what starts now writes to the log that is there
	u.mu.Unlock()
	log, err := openLog(spec.LogFile) // and logs/, gone with the state dir, say
	if err != nil {
		return fmt.Errorf("open the log: %w", err)
	}
	defer log.Close()
	out, err := u.s.reaper.redactTo(spec.Name, log, secrets)
	if err != nil {
		return err
	}
	defer out.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	u.update(func(st *Status) {
		st.State, st.Process, st.StopSignal, st.StopTimeout, st.Cgroup = Starting, Identity{}, spec.StopSignal, spec.StopTimeout, string(u.cg)
	})
	attr := procAttr(spec, []uintptr{devnull.Fd(), out.Fd(), out.Fd()})
	attr.Env = append(attr.Env, secretEnv(secrets)...)
	u.runCg = ""
	if u.cg != "" {
		fd, err := u.newRun()
		if err != nil {
			u.noCgroup("cannot make the cgroup of its run: " + err.Error())
		} else {
			defer unix.Close(fd)
			attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, fd
		}
	}
	id, exited, err := u.s.reaper.forkExec(path, spec.Command, attr)
	if err != nil && attr.Sys.UseCgroupFD && !isExecError(err) {
		// A kernel without CLONE_INTO_CGROUP: the process group it is.
		u.noCgroup("cannot start into the cgroup: " + err.Error())
		attr.Sys.UseCgroupFD = false
		id, exited, err = u.s.reaper.forkExec(path, spec.Command, attr)
	}
	if err != nil {
		if u.runCg != "" {
			unix.Rmdir(string(u.runCg))
		}
		return err
	}
	u.proc, u.exited = id, exited
	now := time.Now().UTC()
	u.update(func(st *Status) {
		st.State, st.Process, st.Started, st.Adopted, st.Cgroup = Running, id, now, false, string(u.cg)
		st.Ready, st.Probe, st.Message, st.NextRestart, st.StartError = spec.Readiness == nil, "", "", time.Time{}, ""
	})
	u.logf("%s: started pid %d: %q", u.name, id.PID, spec.Command)
	u.startProbes()
	return nil
}

// newRun makes the fresh cgroup of the run about to start (see
// cgroup.newRun) and opens it for CLONE_INTO_CGROUP.
func (u *unit) newRun() (int, error) {
	run, err := u.cg.newRun()
	if err != nil {
		return -1, err
	}
	if testHookRun != nil {
		testHookRun(u.spec, run)
	}
	fd, err := run.open()
	if err != nil {
		unix.Rmdir(string(run))
		return -1, err
	}
	u.runCg = run
	return fd, nil
}

// testHookRun, when set, sees each run's cgroup before the process is
// started into it: a test makes the kernel refuse it.
var testHookRun func(spec *Spec, run cgroup)

// noCgroup falls back to the process group, saying why.
func (u *unit) noCgroup(why string) {
	if u.runCg != "" {
		unix.Rmdir(string(u.runCg))
	}
	u.cg, u.runCg, u.cgNote = "", "", why
	u.fillContainment()
}

// isExecError tells the program's own failures (not found, not
// executable, no working directory) from the kernel refusing the clone.
func isExecError(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOEXEC) ||
		errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ETXTBSY)
}

// watch follows the running process until it ends (exit) or a new spec
// calls for it to stop: removed or held (stop; for a hold the spec is
// current), or changed (next, the process stopped already); or until the
// supervisor leaves it to a successor (left, the process still running).
// A process it stopped for a spec ends with the stop's exit, its reason
// naming why.
func (u *unit) watch() (exit *Exit, next *Spec, stop, left bool) {
	var reason string
	stopFor := func(why string) *Exit {
		e := u.stopProcess()
		e.Reason = why
		return e
	}
	fenceC, stopTicker := u.fenceTicker()
	defer stopTicker()
	for {
		select {
		case <-fenceC:
			if f, ok := u.fence(); !ok {
				return u.stopFenced(f), nil, false, false
			}
		case w := <-u.exited:
			e := exitOf(w)
			e.Reason = reason
			u.endRun()
			return e, nil, false, false
		case <-u.gone:
			u.endRun()
			return &Exit{Code: -1, Unknown: true, Reason: reason, Time: time.Now().UTC()}, nil, false, false
		case why := <-u.sick:
			reason = why
			u.logf("%s: %s; stopping pid %d", u.name, why, u.proc.PID)
			e := stopFor(why)
			e.Liveness = true
			return e, nil, false, false
		case <-u.s.quit:
			u.detach()
			return nil, nil, false, true
		case spec := <-u.specs:
			switch {
			case spec == nil:
				u.logf("%s: removed; stopping pid %d", u.name, u.proc.PID)
				return stopFor("stopped: removed"), nil, true, false
			case spec.Hold:
				u.logf("%s: held; stopping pid %d", u.name, u.proc.PID)
				e := stopFor("stopped by cortex-sync stop")
				u.useSpec(spec) // the loop writes the hold
				return e, spec, false, false
			case spec.Hash != u.spec.Hash || spec.RestartGen != u.spec.RestartGen:
				why, stopped := "spec changed", "stopped for a new spec"
				if spec.Hash == u.spec.Hash {
					why, stopped = "restart asked (cortex-sync restart)", "stopped by cortex-sync restart"
				}
				u.logf("%s: %s; stopping pid %d to restart it", u.name, why, u.proc.PID)
				return stopFor(stopped), spec, false, false
			case spec.Gen != u.spec.Gen:
				u.useSpec(spec)
				u.update(func(st *Status) { st.Gen = spec.Gen })
			}
		}
	}
}

// stopProcess stops the running process and its whole tree: the stop
// signal, SIGKILL after the stop timeout; it returns how it ended.
func (u *unit) stopProcess() *Exit { return u.stopProcessWithin(u.spec.StopTimeout) }

// stopProcessWithin stops the running process and its whole tree: the
// stop signal, SIGKILL after timeout.
func (u *unit) stopProcessWithin(timeout time.Duration) *Exit {
	spec := u.spec
	var e *Exit
	wait := func(d time.Duration) bool {
		select {
		case w := <-u.exited:
			e = exitOf(w)
			return true
		case <-u.gone:
			e = &Exit{Code: -1, Unknown: true, Time: time.Now().UTC()}
			return true
		case <-time.After(d):
			return false
		}
	}
	stopTree(u.proc, u.cg, spec.Tag(), spec.StopSignal, timeout, wait)
	if e == nil {
		wait(5 * time.Second)
	}
	if e == nil {
		e = &Exit{Code: -1, Signal: "SIGKILL", Time: time.Now().UTC()}
	}
	u.endRun()
	return e
}

// detach forgets the running process without touching it: its probes end,
// its pidfd is closed. A successor adopts it.
func (u *unit) detach() {
	if u.stop != nil {
		close(u.stop)
		u.stop = nil
	}
	if u.unwatch != nil {
		u.unwatch()
		u.unwatch = nil
	}
	u.proc, u.exited, u.gone = Identity{}, nil, nil
}

// endRun forgets the process that ended and stops what it left behind.
func (u *unit) endRun() {
	pgid := u.proc.PID
	u.detach()
	spec := u.spec
	switch {
	case u.cg != "":
		if u.cg.populated() {
			u.cg.signal(spec.StopSignal)
			if !u.cg.waitEmpty(spec.StopTimeout) {
				u.cg.kill(5 * time.Second)
			}
		}
		u.cg.removeRuns() // never started into again
	default:
		if groupAlive(pgid) || len(strays(spec.Tag())) > 0 {
			killGroup(pgid, spec.StopSignal)
			signalStrays(spec.Tag(), spec.StopSignal)
			deadline := time.Now().Add(spec.StopTimeout)
			for (groupAlive(pgid) || len(strays(spec.Tag())) > 0) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			killGroup(pgid, syscall.SIGKILL)
			killStrays(spec.Tag(), 5*time.Second)
		}
	}
}
