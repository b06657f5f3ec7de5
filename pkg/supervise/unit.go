//go:build linux

package supervise

import (
	"os"
	"sync"
	"time"
)

// A unit is the supervisor's machine for one process: its specs, its
// status, the run loop and the restart policy (restart at once, back off,
// Failed). lifecycle.go holds what one run goes through.

// unit supervises one process through its specs.
type unit struct {
	s     *supervisor
	name  string
	specs chan *Spec // the newest spec, nil when it was removed

	mu   sync.Mutex // guards spec's log fields and st
	spec *Spec
	st   Status

	log      *os.File // guarded by mu: restore opens it again
	orphan   *os.File // the log file a restore found removed, which what runs still writes to (guarded by mu)
	orphanAt int64    // how much of it was copied (guarded by mu)
	cg       cgroup   // the unit's cgroup, which holds the limits
	runCg    cgroup   // the cgroup of the process that runs: a fresh one below cg
	cgNote   string   // why there is no cgroup, or what limits it lacks
	proc     Identity
	exited   <-chan waited   // the process is our child
	gone     <-chan struct{} // the process was adopted
	unwatch  func()
	stop     chan struct{} // closed to end the probes of this run
	sick     chan string   // a liveness probe gave up
	runID    int           // which run the probes report on (guarded by mu)
	capErr   string        // what capping the log last failed on (the serve loop's), said once
}

func newUnit(s *supervisor, name string, spec *Spec) *unit {
	return &unit{s: s, name: name, spec: spec, specs: make(chan *Spec, 1)}
}

// send hands the unit a newer spec; an unread older one is replaced.
func (u *unit) send(spec *Spec) {
	for {
		select {
		case u.specs <- spec:
			return
		default:
			select {
			case <-u.specs:
			default:
			}
		}
	}
}

// update changes the status and writes it.
func (u *unit) update(f func(st *Status)) {
	u.mu.Lock()
	f(&u.st)
	st := u.st
	u.mu.Unlock()
	u.s.wmu.RLock()
	defer u.s.wmu.RUnlock()
	if u.s.left {
		return // a successor's status it would be
	}
	if err := writeJSON(statusFile(u.s.procs, u.name), &st); err != nil {
		u.s.say("%s: write status: %v", u.name, err)
	}
}

// status is a copy of the unit's status.
func (u *unit) status() Status {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.st
}

func (u *unit) logf(format string, args ...any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.log != nil {
		logLine(u.log, format, args...)
	}
}

func (u *unit) capLog() {
	u.mu.Lock()
	file, max := u.spec.LogFile, u.spec.LogMax
	u.copyOrphan()
	u.mu.Unlock()
	msg := ""
	if err := CapLog(file, max); err != nil {
		msg = err.Error()
	}
	if msg != "" && msg != u.capErr { // once, not every second
		u.s.say("%s: cap the log: %s", u.name, msg)
	}
	u.capErr = msg
}

func (u *unit) running() bool { return u.exited != nil || u.gone != nil }

// run is the unit's life: take over what a predecessor left, then start,
// watch, restart and stop the process as its specs say, until a final
// state (exited, failed, held, stopped).
func (u *unit) run(prev *Status) {
	defer func() {
		u.mu.Lock()
		u.dropOrphan()
		if u.log != nil {
			u.log.Close()
		}
		u.mu.Unlock()
		u.s.finished <- u
	}()
	spec := u.spec
	u.useSpec(spec)
	u.st = Status{Shim: u.s.self, Gen: spec.Gen, RestartGen: spec.RestartGen, Hash: spec.Hash, State: Starting,
		Cgroup: spec.Cgroup, StopSignal: spec.StopSignal, StopTimeout: spec.StopTimeout}
	same := prev != nil && prev.Hash == spec.Hash && prev.RestartGen == spec.RestartGen
	if same {
		u.st.Restarts, u.st.QuickExits, u.st.LastExit = prev.Restarts, prev.QuickExits, prev.LastExit
	}
	u.fillContainment()
	if u.takeOver(prev, same && !spec.Hold) {
		u.logf("%s: adopted pid %d", u.name, u.proc.PID)
	} else if same && prev.Gen == spec.Gen && !spec.Hold {
		// Our predecessor died with this very spec: carry on from where
		// it was.
		switch prev.State {
		case BackingOff:
			if !u.backoff(prev.NextRestart) {
				return
			}
		case Running, Starting:
			if !prev.Started.IsZero() {
				u.st.Started = prev.Started
				if !u.ended(&Exit{Code: -1, Unknown: true, Time: time.Now().UTC()}) {
					return
				}
			}
		}
	} else if same && !prev.Started.IsZero() {
		u.st.Restarts++ // started again for the same spec (a sync after a crash)
		u.st.QuickExits = 0
	}
	retried := false
	for {
		select {
		case <-u.s.quit:
			return // the successor starts it, if still due
		default:
		}
		spec := u.spec
		if spec.Hold {
			u.update(func(st *Status) { *st = u.final(Held) })
			u.logf("%s: held (cortex-sync stop)", u.name)
			return
		}
		if !u.running() {
			if spec.Singleton {
				if !u.standby() {
					return
				}
				if u.spec != spec {
					continue // a new spec came while in standby
				}
			}
			if err := u.start(); err != nil {
				u.logf("%s: cannot start: %v", u.name, err)
				u.update(func(st *Status) {
					*st = u.final(Failed)
					st.StartError = err.Error()
					st.LastExit = &Exit{Code: -1, Reason: "cannot start: " + err.Error(), Time: time.Now().UTC()}
				})
				return
			}
		}
		exit, next, stop, left := u.watch()
		switch {
		case left:
			return
		case stop:
			u.update(func(st *Status) { *st = u.final(Stopped); st.LastExit = exit })
			return
		case next != nil:
			if next.Hash != u.spec.Hash || next.RestartGen != u.spec.RestartGen {
				u.adoptSpec(next)
			}
			u.update(func(st *Status) { st.LastExit = exit }) // this stop, not an older end
			retried = false
			continue
		}
		if exit.fenced {
			// Stopped at its fence: no failure; it waits in standby.
			u.update(func(st *Status) {
				st.LastExit, st.State, st.Process, st.Ready = exit, Starting, Identity{}, false
			})
			retried = false
			continue
		}
		if u.bornDead(exit, retried) {
			retried = true
			continue
		}
		retried = false
		if !u.ended(exit) {
			return
		}
	}
}

// bornDead is the safety net under the fresh cgroup of every run: a
// process SIGKILLed before it ran its program, in a cgroup, points at the
// container, not at the program (a kernel that refuses the cgroup, as
// Linux 6.18 does one that was killed). It is started once more, at once,
// in a fresh cgroup, before its end counts; retried says the run that
// ended was that retry already.
func (u *unit) bornDead(e *Exit, retried bool) bool {
	if !e.unborn || e.Signal != "SIGKILL" || u.runCg == "" {
		return false
	}
	if retried {
		e.Reason = "before it ran its program"
		return false
	}
	u.update(func(st *Status) { st.State, st.Process, st.Ready = Starting, Identity{}, false })
	u.logf("%s: killed by SIGKILL before it ran its program, in %s: the kernel refused the cgroup; starting it once more, in a fresh cgroup", u.name, u.runCg)
	return true
}

// final is the status of a unit that ends with nothing running, for its
// current spec.
func (u *unit) final(state State) Status {
	st := u.st
	st.State, st.Process, st.Ready, st.NextRestart, st.Probe, st.Message = state, Identity{}, false, time.Time{}, "", ""
	st.Gen, st.RestartGen, st.Hash = u.spec.Gen, u.spec.RestartGen, u.spec.Hash
	return st
}

// useSpec makes spec the current one.
func (u *unit) useSpec(spec *Spec) {
	u.mu.Lock()
	u.spec = spec
	if u.log == nil || u.log.Name() != spec.LogFile {
		if u.log != nil {
			u.log.Close()
		}
		u.log, _ = openLog(spec.LogFile)
	}
	u.mu.Unlock()
	u.cg = cgroup(spec.Cgroup)
}

// adoptSpec moves to a new spec whose process was stopped to change it:
// counts start afresh.
func (u *unit) adoptSpec(spec *Spec) {
	u.useSpec(spec)
	u.fillContainment()
	u.update(func(st *Status) {
		st.Gen, st.RestartGen, st.Hash, st.Restarts, st.QuickExits, st.StartError = spec.Gen, spec.RestartGen, spec.Hash, 0, 0, ""
		st.State, st.Process, st.Ready, st.NextRestart = Starting, Identity{}, false, time.Time{}
	})
}

func (u *unit) fillContainment() {
	if u.cg != "" {
		note, err := u.cg.setup(u.spec.Resources)
		if err != nil {
			u.cgNote = "cannot make the cgroup: " + err.Error()
			u.cg = ""
		} else {
			u.cgNote = note
		}
	}
	c := "cgroup " + string(u.cg)
	switch {
	case u.cg != "" && u.cgNote != "":
		c += " (" + u.cgNote + ")"
	case u.cg != "":
	case u.cgNote != "":
		c = "process group (" + u.cgNote + ")"
	case u.spec.NoCgroup != "":
		c = "process group (" + u.spec.NoCgroup + ")"
	default:
		c = "process group (no writable cgroup v2 hierarchy)"
	}
	u.mu.Lock()
	u.st.Containment = c
	u.mu.Unlock()
}

// ended applies the restart policy to a process that ended: restart it at
// once after a long run, after a backoff after a quick one, or end the
// unit (exited, failed). It reports whether the unit goes on.
func (u *unit) ended(e *Exit) bool {
	spec := u.spec
	ran := e.Time.Sub(u.status().Started)
	if !spec.RestartPolicy.Restarts(e) {
		u.logf("%s: %s after %s; restart policy %s: done", u.name, e, ran.Round(time.Millisecond), spec.RestartPolicy.OrDefault())
		u.update(func(st *Status) { *st = u.final(Exited); st.LastExit = e })
		return false
	}
	wait, quick, failed := spec.Backoff.Next(ran, u.status().QuickExits)
	if failed {
		u.logf("%s: %s after %s; %d quick failures in a row: failed (cortex-sync restart Process/%s starts it again)", u.name, e, ran.Round(time.Millisecond), quick, u.name)
		u.update(func(st *Status) { *st = u.final(Failed); st.LastExit, st.QuickExits = e, quick })
		return false
	}
	// No longer running: a status read now must not name the dead pid.
	u.update(func(st *Status) {
		st.LastExit, st.QuickExits = e, quick
		st.State, st.Process, st.Ready = Starting, Identity{}, false
	})
	if wait == 0 {
		u.logf("%s: %s after %s; restarting", u.name, e, ran.Round(time.Millisecond))
		u.update(func(st *Status) { st.Restarts++ })
		return true
	}
	u.logf("%s: %s after %s; restarting in %s (quick failure %d of %d)", u.name, e, ran.Round(time.Millisecond), wait, quick, spec.Backoff.WithDefaults().StartLimit)
	if !u.backoff(time.Now().Add(wait)) {
		return false
	}
	u.update(func(st *Status) { st.Restarts++ })
	return true
}

// backoff waits until at, or until a spec calls for something else. It
// reports whether to start the process now.
func (u *unit) backoff(at time.Time) bool {
	u.update(func(st *Status) {
		st.State, st.Process, st.Ready, st.NextRestart, st.Probe, st.Message = BackingOff, Identity{}, false, at.UTC(), "", ""
	})
	for {
		select {
		case <-time.After(time.Until(at)):
			return true
		case <-u.s.quit:
			return false // the successor reads the backoff from the status
		case spec := <-u.specs:
			switch {
			case spec == nil:
				u.update(func(st *Status) { *st = u.final(Stopped) })
				return false
			case spec.Hold || spec.Hash != u.spec.Hash || spec.RestartGen != u.spec.RestartGen:
				if spec.Hold {
					u.useSpec(spec) // the loop writes the hold
				} else {
					u.adoptSpec(spec)
				}
				return true // the loop holds it, or starts the new spec now
			case spec.Gen != u.spec.Gen:
				u.useSpec(spec)
				u.update(func(st *Status) { st.Gen = spec.Gen })
			}
		}
	}
}
