//go:build linux

package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// The agent as the supervisor. The agent's binary and runtime are paid
// anyway, so where it runs it supervises its state dir's processes
// in-process, with the same units as the re-executed supervisor: a
// process costs a unit (about 0.1 MB), not a runtime. The re-executed
// supervisor is the fallback: for a sync without an agent, between two
// agents, and where no writable cgroup v2 contains the processes (the
// agent is not a child subreaper, so there only the re-executed
// supervisor, which is one, keeps orphans of the trees contained).

// ErrNoContainment says the agent does not host the supervisor: the
// processes could not be contained without a child subreaper.
var ErrNoContainment = errors.New("no writable cgroup v2 hierarchy to contain the processes in-process")

// Host is the agent's in-process supervisor of one state dir.
type Host struct {
	stateDir string
	s        *supervisor
	sigs     []chan os.Signal
	leave    chan struct{}
	done     chan struct{}
	handover sync.Once
	err      error // the handover's
}

// NewHost makes this process the supervisor of stateDir: a re-executed
// supervisor that serves it is asked to leave (its processes keep running
// and are adopted by pid and start time), the lock is taken, and the specs
// are acted upon. Without a writable cgroup v2 hierarchy it returns an
// error wrapping ErrNoContainment, and the re-executed supervisor goes on
// serving. Handover ends it.
func NewHost(stateDir string) (*Host, error) {
	if dir, why := CgroupBase(stateDir); dir == "" {
		return nil, fmt.Errorf("%w (%s)", ErrNoContainment, why)
	}
	procs := procsDir(stateDir)
	if err := makeDir(procs); err != nil {
		return nil, err
	}
	logf := supervisorLog(stateDir)
	CapLog(logf, 1<<20)
	log, err := openLog(logf)
	if err != nil {
		return nil, err
	}
	h := &Host{stateDir: stateDir, s: newSupervisor(procs, true, log), leave: make(chan struct{}), done: make(chan struct{})}
	// Signals first: a starter may signal as soon as .shim names us.
	chld, wake := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	signal.Notify(wake, hostWake)
	h.sigs = []chan os.Signal{chld, wake}
	if err := h.takeLock(); err != nil {
		h.stopSignals()
		log.Close()
		return nil, err
	}
	h.s.dir, _ = idOf(h.s.procs)
	go func() {
		for range chld {
			h.s.reaper.reap()
		}
	}()
	h.s.announce("running")
	h.s.scan()
	logLine(log, "supervising in the agent, pid %d", h.s.self.PID)
	go func() {
		defer close(h.done)
		h.s.serve(wake, nil, h.leave)
	}()
	return h, nil
}

// takeLock takes the state dir's lock (dirLock), asking a re-executed
// supervisor that holds it to leave. Another agent's supervisor is never
// asked: that is an error.
func (h *Host) takeLock() error {
	// It leaves once its units let go: one stopping a process may take
	// its stop timeout.
	deadline := time.Now().Add(time.Minute)
	var asked Identity
	for {
		if ok, err := h.s.lk.try(); ok || err != nil {
			return err
		}
		var info shimInfo
		if ok, _ := readJSON(filepath.Join(h.s.procs, shimFile), &info); ok && info.Shim.Alive() && info.Shim != asked {
			if info.Hosted {
				return fmt.Errorf("the agent pid %d already supervises %s", info.Shim.PID, h.stateDir)
			}
			// An older cortex-sync dies of SIGUSR1 instead: as after a
			// supervisor's death, its processes run on and are adopted.
			info.Shim.Signal(leaveSignal)
			asked = info.Shim
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the supervisor pid %d did not leave %s within a minute", asked.PID, h.s.procs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *Host) stopSignals() {
	for _, c := range h.sigs {
		signal.Stop(c)
	}
}

// Handover ends the agent's supervision, its processes left running, and
// starts a re-executed supervisor that adopts them by pid and start time,
// so they stay supervised while no agent runs. It waits until that
// supervisor serves, or found nothing to supervise. Called again, it
// returns what the first call did.
func (h *Host) Handover() error {
	h.handover.Do(func() { h.err = h.handOver() })
	return h.err
}

func (h *Host) handOver() error {
	close(h.leave)
	<-h.done
	h.stopSignals()
	close(h.sigs[0]) // SIGCHLD: the reaping ends
	defer h.s.log.Close()
	// Unlocked only now: nothing of ours acts on a process any more.
	h.s.lk.Close()
	if left, err := h.anySpec(); err != nil || !left {
		return err
	}
	id, err := ensureSupervisor(h.stateDir)
	if err != nil {
		return fmt.Errorf("hand the processes over to a supervisor: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var info shimInfo
		if ok, _ := readJSON(filepath.Join(h.s.procs, shimFile), &info); ok && info.State == "running" && info.Shim.Alive() {
			h.s.say("handed the processes over to the supervisor pid %d", info.Shim.PID)
			return nil
		}
		if id.PID != 0 && !id.Alive() {
			return nil // it found nothing left to supervise, or another serves
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the supervisor pid %d did not take the processes on within 10s (see %s)", id.PID, supervisorLog(h.stateDir))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// anySpec reports whether a spec is left to supervise; a procs directory
// that is a symlink now is an error: no supervisor can take them on.
func (h *Host) anySpec() (bool, error) {
	entries, err := readDir(h.s.procs)
	if errors.Is(err, state.ErrSymlink) {
		return false, fmt.Errorf("hand the processes over: %w (they run on unsupervised)", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".spec") && !strings.HasPrefix(e.Name(), ".") {
			return true, nil
		}
	}
	return false, nil
}
