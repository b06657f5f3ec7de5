//go:build linux

package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// The starter's side. A starter (sync, the agent, an operator's verb)
// never forks a process itself: it writes the process's spec, its intent,
// to procs/<name>.spec, makes sure the state dir's supervisor runs, and
// waits for the status to acknowledge that spec. Whatever moment the
// starter dies at, the spec on disk and the one supervisor that acts on
// it leave one process per name, never two.

// procsDir is where specs and statuses live; absolute, as the supervisor
// runs in /.
func procsDir(stateDir string) string {
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	return filepath.Join(stateDir, "procs")
}

// Run asks the supervisor to run spec: to start it, to restart it into
// this spec if another runs, or to adopt the process that runs this very
// spec unsupervised; and waits until the status reports on it. A hold or a
// restart an operator asked for is kept.
func Run(stateDir string, spec Spec) (*Status, error) {
	procs := procsDir(stateDir)
	if err := makeDir(procs); err != nil {
		return nil, err
	}
	if err := makeDir(filepath.Dir(spec.LogFile)); err != nil {
		return nil, err
	}
	if prev, _ := readSpec(specFile(procs, spec.Name)); prev != nil {
		spec.RestartGen, spec.Hold = prev.RestartGen, prev.Hold
	}
	return submit(stateDir, &spec)
}

// Restart restarts the process now, as a rollout does: it is stopped and
// started with its spec, which also ends a Failed state or a hold.
func Restart(stateDir, name string) (*Status, error) {
	return control(stateDir, name, func(s *Spec) { s.RestartGen++; s.Hold = false })
}

// Hold stops the process until Release; a sync leaves it stopped.
func Hold(stateDir, name string) (*Status, error) {
	return control(stateDir, name, func(s *Spec) { s.Hold = true })
}

// Release ends a hold: the process starts again.
func Release(stateDir, name string) (*Status, error) {
	return control(stateDir, name, func(s *Spec) { s.Hold = false })
}

func control(stateDir, name string, change func(*Spec)) (*Status, error) {
	spec, err := readSpec(specFile(procsDir(stateDir), name))
	if err != nil {
		return nil, err
	}
	if spec == nil {
		return nil, ErrNoSpec
	}
	change(spec)
	return submit(stateDir, spec)
}

// submit writes the spec under a new generation and waits for the
// supervisor to acknowledge it.
func submit(stateDir string, spec *Spec) (*Status, error) {
	procs := procsDir(stateDir)
	file := statusFile(procs, spec.Name)
	prev, err := ReadStatus(file)
	if errors.Is(err, state.ErrSymlink) {
		return nil, err // the supervisor could never say it took the spec on
	}
	spec.Gen = uint64(time.Now().UnixNano())
	if prev != nil && spec.Gen <= prev.Gen {
		spec.Gen = prev.Gen + 1
	}
	if err := writeJSON(specFile(procs, spec.Name), spec); err != nil {
		return nil, fmt.Errorf("write the spec: %w", err)
	}
	// The old process is stopped before the new one starts.
	timeout := spec.StopTimeout + 10*time.Second
	if prev != nil {
		timeout += prev.StopTimeout
	}
	deadline := time.Now().Add(timeout)
	var started Identity // the supervisor this call started, if any
	for i := 0; ; i++ {
		if i%100 == 0 && !started.Alive() { // now, and every 200ms should it have died
			id, err := ensureSupervisor(stateDir)
			if err != nil {
				return nil, err
			}
			started = id
		}
		st, err := ReadStatus(file)
		if err == nil && st != nil && st.Gen == spec.Gen && st.State != Starting {
			return st, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the supervisor did not take %s on within %s (see %s)", spec.Name, timeout, supervisorLog(stateDir))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func supervisorLog(stateDir string) string { return filepath.Join(stateDir, "logs", ".supervisor.log") }

// ensureSupervisor wakes the live supervisor to read the specs, or starts
// one and returns it. One leaving (it had nothing left) is replaced; the
// new one waits for its lock.
func ensureSupervisor(stateDir string) (Identity, error) {
	procs := procsDir(stateDir)
	var info shimInfo
	if ok, _ := readJSON(filepath.Join(procs, shimFile), &info); ok && info.Shim.Alive() {
		if info.State == "running" {
			info.Shim.Signal(info.wake())
			return Identity{}, nil
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return Identity{}, err
	}
	logf := supervisorLog(stateDir)
	CapLog(logf, 1<<20)
	out, err := openLog(logf)
	if err != nil {
		return Identity{}, err
	}
	defer out.Close()
	cmd := exec.Command(exe, ShimArg, procs)
	cmd.Args[0] = os.Args[0] // the name this binary was run as
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = slices.Clone(supervisorEnv)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return Identity{}, fmt.Errorf("start the supervisor: %w", err)
	}
	id := Of(cmd.Process.Pid)
	// Reap it should it end while this process runs; after that, whoever
	// adopts it does.
	go cmd.Wait()
	return id, nil
}

// Settle waits, up to timeout, until the process of name, just started,
// has proven itself: ready, for a spec with a readiness probe, else up for
// its minUptime (a shorter run would be a quick failure). It returns the
// status then, and whether it got there; a status in which nothing runs
// any more (backing off, failed, exited, held, stopped) it returns at
// once: that is what the start came to.
func Settle(ctx context.Context, stateDir, name string, timeout time.Duration) (st *Status, settled bool, err error) {
	spec, err := readSpec(specFile(procsDir(stateDir), name))
	if err != nil || spec == nil {
		return nil, false, err
	}
	up := spec.Backoff.WithDefaults().MinUptime
	deadline := time.Now().Add(timeout)
	for {
		if st, err = Read(stateDir, name); err != nil || st == nil {
			return st, false, err
		}
		switch {
		case st.State != Running && st.State != Starting:
			return st, true, nil
		case st.State == Starting || !st.Process.Alive():
			// Starting, or it ended and the status is about to say how.
		case spec.Readiness != nil && st.Ready, spec.Readiness == nil && time.Since(st.Started) >= up:
			return st, true, nil
		}
		if time.Now().After(deadline) {
			return st, false, nil
		}
		select {
		case <-ctx.Done():
			return st, false, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Read is the status of a process, nil when it has none.
func Read(stateDir, name string) (*Status, error) {
	return ReadStatus(statusFile(procsDir(stateDir), name))
}

// Remove stops a process for good (prune) and deletes what it had on the
// host: spec, status, logs and cgroup. sig and timeout stop it when no
// status says how.
func Remove(stateDir, name string, sig syscall.Signal, timeout time.Duration) error {
	procs := procsDir(stateDir)
	file := statusFile(procs, name)
	if err := removeFile(specFile(procs, name)); err != nil {
		return err
	}
	st, err := ReadStatus(file)
	if err != nil {
		return err
	}
	if st != nil && st.StopSignal != 0 {
		sig, timeout = st.StopSignal, st.StopTimeout
	}
	if st.Supervised() {
		ensureSupervisor(stateDir) // it reads that the spec is gone and stops it
		deadline := time.Now().Add(timeout + 5*time.Second)
		for time.Now().Before(deadline) {
			if st, _ = ReadStatus(file); st == nil || !st.Supervised() {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	if st != nil {
		// Unsupervised, or the supervisor did not manage: stop it here.
		stopTree(st.Process, cgroup(st.Cgroup), tagFor(stateDir, name), sig, timeout, nil)
		if cg := cgroup(st.Cgroup); cg != "" {
			if cg.populated() && !cg.kill(5*time.Second) {
				return fmt.Errorf("processes are left in %s", cg)
			}
			cg.remove()
		}
		if st.Process.Alive() {
			return fmt.Errorf("pid %d did not stop", st.Process.PID)
		}
	}
	logFile, _ := Files(stateDir, name)
	for _, f := range []string{file, file + ".tmp", specFile(procs, name) + ".tmp", logFile, logFile + ".1", logFile + ".1.tmp"} {
		if err := removeFile(f); err != nil {
			return err
		}
	}
	return removeTemps(logFile + ".1") // a rotation's, killed
}

// StopAll stops the supervisor of a state dir and every process it had,
// the unsupervised ones too (a test's cleanup, a host's teardown); specs
// are left, so the next sync starts them again.
func StopAll(stateDir string) {
	procs := procsDir(stateDir)
	// An agent's supervisor hands over to a re-executed one on SIGTERM:
	// that one is stopped in turn. This process, hosting, is not signalled.
	for range 3 {
		var info shimInfo
		if ok, _ := readJSON(filepath.Join(procs, shimFile), &info); !ok || !info.Shim.Alive() || info.Shim.PID == os.Getpid() {
			break
		}
		info.Shim.Signal(syscall.SIGTERM)
		info.Shim.WaitGone(30 * time.Second)
	}
	entries, _ := readDir(procs)
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		st, err := ReadStatus(filepath.Join(procs, e.Name()))
		if err != nil || st == nil {
			continue
		}
		stopTree(st.Process, cgroup(st.Cgroup), tagFor(stateDir, name), syscall.SIGKILL, time.Second, nil)
		if cg := cgroup(st.Cgroup); cg != "" {
			cg.kill(5 * time.Second)
			cg.remove()
		}
	}
}
