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
	lk       *dirLock
	units    map[string]*unit
	finished chan *unit
	quit     chan struct{} // closed when the supervisor leaves its processes to a successor

	logMu sync.Mutex
	log   *os.File // its own lines (say); the re-executed one's stderr too

	dir  dirID  // the procs directory it locked; another one there means the state dir was removed
	said string // the last line sayOnce said

	wmu  sync.RWMutex // held to write a status; left is set under it
	left bool         // no status is written any more: a successor may hold the lock
}

func newSupervisor(procs string, hosted bool, log *os.File) *supervisor {
	return &supervisor{procs: procs, self: Self(), hosted: hosted, reaper: newReaper(!hosted), log: log, lk: newDirLock(procs),
		units: map[string]*unit{}, finished: make(chan *unit, 16), quit: make(chan struct{})}
}

// say writes one of the supervisor's own lines to its log.
func (s *supervisor) say(format string, args ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	logLine(s.log, format, args...)
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

	ok, err := s.lock()
	if err != nil {
		s.say("%v", err)
		return 1
	}
	if !ok {
		return 0 // another supervisor serves this state dir
	}
	defer s.lk.Close()
	s.dir, _ = idOf(s.procs)
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
		s.say("release the executable's pages: %v", err)
	}
	leave := make(chan struct{})
	go func() {
		<-usr1
		close(leave)
	}()
	if s.serve(hup, term, leave) {
		s.say("left the processes to the agent")
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
			if !s.intact() {
				continue
			}
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
			removeFile(filepath.Join(s.procs, shimFile))
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
		removeFile(filepath.Join(s.procs, shimFile))
	}
}

// lock takes the state dir's lock (dirLock), held for the supervisor's
// life. false without an error means another live supervisor holds it and
// serves.
func (s *supervisor) lock() (bool, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if ok, err := s.lk.try(); ok || err != nil {
			return ok, err
		}
		// The holder is either serving (then it has our spec), leaving, or
		// making the state dir again (then it serves in a moment).
		var info shimInfo
		if ok, _ := readJSON(filepath.Join(s.procs, shimFile), &info); ok && info.State == "running" && info.Shim.Alive() {
			info.Shim.Signal(info.wake())
			return false, nil
		}
		if time.Now().After(deadline) {
			return false, errors.New("another supervisor holds the lock of " + s.procs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *supervisor) announce(state string) {
	info := shimInfo{Shim: s.self, State: state}
	if s.hosted {
		info.Wake, info.Hosted = int(hostWake), true
	}
	if err := writeJSON(filepath.Join(s.procs, shimFile), info); err != nil {
		s.sayOnce("announce itself: %v", err) // starters cannot wake it: they find it every 30s
	}
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
	removeFile(filepath.Join(s.procs, shimFile))
	return true
}

// scan reads every spec and hands it to its unit, starting a unit for a
// spec not yet acted upon; a unit whose spec is gone stops its process.
func (s *supervisor) scan() {
	if !s.intact() {
		return
	}
	entries, err := readDir(s.procs)
	if err != nil {
		s.say("read %s: %v", s.procs, err)
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
				s.say("%s: %v", name, err)
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
