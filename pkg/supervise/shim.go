//go:build linux

package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/exemem"
	"golang.org/x/sys/unix"
)

// shimInfo is procs/.shim: who the live supervisor is and how to reach it.
type shimInfo struct {
	Shim  Identity `json:"shim"`
	State string   `json:"state"` // running, or exiting once it has nothing left to do
	// Wake is the signal that makes it read the specs: SIGHUP (0) for the
	// re-executed supervisor; the agent, whose SIGHUP reloads its config,
	// takes SIGUSR2.
	Wake int `json:"wake,omitempty"`
	// Hosted: the supervisor is an agent's, in-process; it is never asked
	// to leave.
	Hosted bool `json:"hosted,omitempty"`
}

// wake is the signal that makes the supervisor read the specs.
func (i shimInfo) wake() syscall.Signal {
	if i.Wake == 0 {
		return syscall.SIGHUP
	}
	return syscall.Signal(i.Wake)
}

// Signals of the supervisors. leaveSignal asks the re-executed supervisor
// to leave its processes running and exit, for an agent to take them on.
const (
	hostWake    = syscall.SIGUSR2
	leaveSignal = syscall.SIGUSR1
)

// supervisor supervises every process whose spec is in its procs
// directory. One runs per state dir (procs/.lock keeps it so): the
// re-executed cortex-sync, which exits when nothing is left to supervise,
// or an agent's, in-process, for the agent's life.
type supervisor struct {
	procs    string
	self     Identity
	hosted   bool
	reaper   *reaper
	log      *os.File // its own lines; also its stderr
	units    map[string]*unit
	finished chan *unit
	quit     chan struct{} // closed when the supervisor leaves its processes to a successor

	wmu  sync.RWMutex // held to write a status; left is set under it
	left bool         // no status is written any more: a successor may hold the lock
}

func newSupervisor(procs string, hosted bool, log *os.File) *supervisor {
	return &supervisor{procs: procs, self: Self(), hosted: hosted, reaper: newReaper(!hosted), log: log,
		units: map[string]*unit{}, finished: make(chan *unit, 16), quit: make(chan struct{})}
}

// RunShim is the supervisor's main: cortex-sync __shim PROCS_DIR.
func RunShim(args []string) int {
	if len(args) > 0 && args[0] == redactArg {
		return runRedactor()
	}
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "cortex-sync supervisor: no procs directory given")
		return 2
	}
	s := newSupervisor(args[0], false, os.Stderr)
	// Signals first: a starter may signal as soon as .shim names us.
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, leaveSignal)
	signal.Ignore(syscall.SIGPIPE)

	lock, err := s.lock()
	if err != nil {
		logLine(s.log, "%v", err)
		return 1
	}
	if lock == nil {
		return 0 // another supervisor serves this state dir
	}
	defer lock.Close()
	// Orphans of the processes come to the supervisor, which reaps them.
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	go func() {
		for range chld {
			s.reaper.reap()
		}
	}()
	s.announce("running")
	// What the package inits and the first scan allocated is garbage now;
	// give it back, and keep the heap small from here on. So is most of
	// the binary they touched (see footprint.go).
	debug.SetGCPercent(50)
	s.scan()
	debug.FreeOSMemory()
	if _, err := exemem.Release(); err != nil {
		logLine(s.log, "release the executable's pages: %v", err)
	}
	leave := make(chan struct{})
	go func() {
		<-usr1
		close(leave)
	}()
	if s.serve(hup, term, leave) {
		logLine(s.log, "left the processes to the agent")
	}
	return 0
}

// serve is the supervisor's loop once it holds the lock and has scanned:
// it reads the specs when woken, caps the logs, and returns on term
// (stopping every process), on leave (leaving them running for a
// successor, left true) or, re-executed, once nothing is left to
// supervise.
func (s *supervisor) serve(wake, term <-chan os.Signal, leave <-chan struct{}) (left bool) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 1; ; n++ {
		if !s.hosted && len(s.units) == 0 && s.idle() {
			return false
		}
		select {
		case <-wake:
			s.scan()
		case <-tick.C:
			for _, u := range s.units {
				u.capLog()
			}
			if n%30 == 0 {
				s.scan() // a safety net for a lost signal
			}
		case u := <-s.finished:
			if s.units[u.name] == u {
				delete(s.units, u.name)
			}
			s.scan() // a spec may have come while it finished
		case <-term:
			s.stopAll()
			os.Remove(filepath.Join(s.procs, shimFile))
			return false
		case <-leave:
			s.leave()
			return true
		}
	}
}

// leave ends every unit without touching its process, and writes nothing
// after: the statuses say what runs, for a successor to adopt by identity,
// as after the supervisor's death. The caller still holds the lock.
func (s *supervisor) leave() {
	close(s.quit)
	for len(s.units) > 0 {
		if u := <-s.finished; s.units[u.name] == u {
			delete(s.units, u.name)
		}
	}
	s.wmu.Lock()
	s.left = true
	s.wmu.Unlock()
	var info shimInfo
	if ok, _ := readJSON(filepath.Join(s.procs, shimFile), &info); ok && info.Shim == s.self {
		os.Remove(filepath.Join(s.procs, shimFile))
	}
}

// tryLock takes f's lock if no one holds it: false when someone does.
func tryLock(f *os.File) (bool, error) {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// lockResult is f, locked, or the error that kept it from being locked
// (then f is closed).
func lockResult(f *os.File, err error) (*os.File, error) {
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f, nil
}

// lock takes procs/.lock, held for the supervisor's life. nil without an
// error means another live supervisor holds it and serves.
func (s *supervisor) lock() (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(s.procs, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if ok, err := tryLock(f); ok || err != nil {
			return lockResult(f, err)
		}
		// The holder is either serving (then it has our spec) or leaving.
		var info shimInfo
		if ok, _ := readJSON(filepath.Join(s.procs, shimFile), &info); ok && info.State == "running" && info.Shim.Alive() {
			info.Shim.Signal(info.wake())
			f.Close()
			return nil, nil
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, errors.New("another supervisor holds " + f.Name())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *supervisor) announce(state string) {
	info := shimInfo{Shim: s.self, State: state}
	if s.hosted {
		info.Wake, info.Hosted = int(hostWake), true
	}
	writeJSON(filepath.Join(s.procs, shimFile), info)
}

// idle ends the supervisor once nothing is left to supervise. A starter
// writes its spec before it looks for a supervisor, so a last scan after
// announcing the exit sees any spec a starter could have missed us with.
func (s *supervisor) idle() bool {
	s.announce("exiting")
	s.scan()
	if len(s.units) > 0 {
		s.announce("running")
		return false
	}
	os.Remove(filepath.Join(s.procs, shimFile))
	return true
}

// scan reads every spec and hands it to its unit, starting a unit for a
// spec not yet acted upon; a unit whose spec is gone stops its process.
func (s *supervisor) scan() {
	entries, err := os.ReadDir(s.procs)
	if err != nil {
		logLine(s.log, "read %s: %v", s.procs, err)
		return
	}
	seen := map[string]bool{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".spec")
		if !ok || strings.HasPrefix(name, ".") {
			continue
		}
		spec, err := readSpec(specFile(s.procs, name))
		if err != nil || spec == nil {
			if err != nil {
				logLine(s.log, "%s: %v", name, err)
			}
			continue
		}
		seen[name] = true
		if u := s.units[name]; u != nil {
			u.send(spec)
			continue
		}
		prev, _ := ReadStatus(statusFile(s.procs, name))
		if prev != nil && prev.Gen == spec.Gen && prev.State.Final() {
			continue // done with this spec
		}
		u := newUnit(s, name, spec)
		s.units[name] = u
		go u.run(prev)
	}
	for name, u := range s.units {
		if !seen[name] {
			u.send(nil)
		}
	}
}

// stopAll stops every process and waits for them (SIGTERM to the
// supervisor: the host is shutting down, or a test ends).
func (s *supervisor) stopAll() {
	for _, u := range s.units {
		u.send(nil)
	}
	for len(s.units) > 0 {
		u := <-s.finished
		delete(s.units, u.name)
	}
}

// unit supervises one process through its specs.
type unit struct {
	s     *supervisor
	name  string
	specs chan *Spec // the newest spec, nil when it was removed

	mu   sync.Mutex // guards spec's log fields and st
	spec *Spec
	st   Status

	log     *os.File
	cg      cgroup
	cgNote  string // why there is no cgroup, or what limits it lacks
	proc    Identity
	exited  <-chan unix.WaitStatus // the process is our child
	gone    <-chan struct{}        // the process was adopted
	unwatch func()
	stop    chan struct{} // closed to end the probes of this run
	sick    chan string   // a liveness probe gave up
	runID   int           // which run the probes report on (guarded by mu)
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
		logLine(u.s.log, "%s: write status: %v", u.name, err)
	}
}

// status is a copy of the unit's status.
func (u *unit) status() Status {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.st
}

func (u *unit) logf(format string, args ...any) {
	if u.log != nil {
		logLine(u.log, format, args...)
	}
}

func (u *unit) capLog() {
	u.mu.Lock()
	file, max := u.spec.LogFile, u.spec.LogMax
	u.mu.Unlock()
	if err := CapLog(file, max); err != nil {
		logLine(u.s.log, "%s: cap the log: %v", u.name, err)
	}
}

func (u *unit) running() bool { return u.exited != nil || u.gone != nil }

// run is the unit's life: take over what a predecessor left, then start,
// watch, restart and stop the process as its specs say, until a final
// state (exited, failed, held, stopped).
func (u *unit) run(prev *Status) {
	defer func() {
		if u.log != nil {
			u.log.Close()
		}
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
			u.update(func(st *Status) { *st = u.final(Stopped) })
			return
		case next != nil:
			if next.Hash != u.spec.Hash || next.RestartGen != u.spec.RestartGen {
				u.adoptSpec(next)
			}
			continue
		}
		if !u.ended(exit) {
			return
		}
	}
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
	u.mu.Unlock()
	if u.log == nil || u.log.Name() != spec.LogFile {
		if u.log != nil {
			u.log.Close()
		}
		os.MkdirAll(filepath.Dir(spec.LogFile), 0o700)
		u.log, _ = openLog(spec.LogFile)
	}
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
	u.cgNote = ""
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
	}
	if u.cg != "" {
		if u.cg.populated() {
			u.logf("%s: killing what is left in %s", u.name, u.cg)
			u.cg.kill(5 * time.Second)
		}
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
	log, err := openLog(spec.LogFile)
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
	if u.cg != "" {
		fd, err := u.cg.open()
		if err == nil {
			defer unix.Close(fd)
			attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, fd
		}
	}
	id, exited, err := u.s.reaper.forkExec(path, spec.Command, attr)
	if err != nil && attr.Sys.UseCgroupFD && !isExecError(err) {
		// A kernel without CLONE_INTO_CGROUP: the process group it is.
		u.cg, u.cgNote = "", "cannot start into the cgroup: "+err.Error()
		u.fillContainment()
		attr.Sys.UseCgroupFD = false
		id, exited, err = u.s.reaper.forkExec(path, spec.Command, attr)
	}
	if err != nil {
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
func (u *unit) watch() (exit *Exit, next *Spec, stop, left bool) {
	var reason string
	for {
		select {
		case ws := <-u.exited:
			e := exitOf(ws)
			e.Reason = reason
			u.endRun()
			return e, nil, false, false
		case <-u.gone:
			u.endRun()
			return &Exit{Code: -1, Unknown: true, Reason: reason, Time: time.Now().UTC()}, nil, false, false
		case why := <-u.sick:
			reason = why
			u.logf("%s: %s; stopping pid %d", u.name, why, u.proc.PID)
			e := u.stopProcess()
			e.Reason, e.Liveness = why, true
			return e, nil, false, false
		case <-u.s.quit:
			u.detach()
			return nil, nil, false, true
		case spec := <-u.specs:
			switch {
			case spec == nil:
				u.logf("%s: removed; stopping pid %d", u.name, u.proc.PID)
				u.stopProcess()
				return nil, nil, true, false
			case spec.Hold:
				u.logf("%s: held; stopping pid %d", u.name, u.proc.PID)
				u.stopProcess()
				u.useSpec(spec) // the loop writes the hold
				return nil, spec, false, false
			case spec.Hash != u.spec.Hash || spec.RestartGen != u.spec.RestartGen:
				why := "spec changed"
				if spec.Hash == u.spec.Hash {
					why = "restart asked (cortex-sync restart)"
				}
				u.logf("%s: %s; stopping pid %d to restart it", u.name, why, u.proc.PID)
				u.stopProcess()
				return nil, spec, false, false
			case spec.Gen != u.spec.Gen:
				u.useSpec(spec)
				u.update(func(st *Status) { st.Gen = spec.Gen })
			}
		}
	}
}

// stopProcess stops the running process and its whole tree: the stop
// signal, SIGKILL after the stop timeout; it returns how it ended.
func (u *unit) stopProcess() *Exit {
	spec := u.spec
	var e *Exit
	wait := func(d time.Duration) bool {
		select {
		case ws := <-u.exited:
			e = exitOf(ws)
			return true
		case <-u.gone:
			e = &Exit{Code: -1, Unknown: true, Time: time.Now().UTC()}
			return true
		case <-time.After(d):
			return false
		}
	}
	stopTree(u.proc, u.cg, spec.Tag(), spec.StopSignal, spec.StopTimeout, wait)
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
	u.update(func(st *Status) { st.LastExit, st.QuickExits = e, quick })
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
