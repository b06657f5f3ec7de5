// Package supervise runs supervised processes. Each runs under a shim,
// cortex-sync re-executed in a hidden mode, in a session of its own: the
// shim is the process's parent, so it reaps it and knows how it ended; it
// applies the restart policy with backoff, runs the probes, caps the log,
// and reports in a status file. Processes so outlive the command that
// started them, and are re-adopted by identity (pid and start time).
package supervise

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/health"
)

// ShimArg is the hidden first argument that makes cortex-sync a shim.
const ShimArg = "__shim"

// Spec is what a shim runs, passed to it as JSON on file descriptor 3.
type Spec struct {
	ID            string         `json:"id"`
	Command       []string       `json:"command"`
	Env           []string       `json:"env"`
	Dir           string         `json:"dir,omitempty"`
	UID           int            `json:"uid"` // -1: as the shim
	GID           int            `json:"gid"`
	RestartPolicy string         `json:"restartPolicy"` // Always, OnFailure, Never
	StopSignal    syscall.Signal `json:"stopSignal"`
	StopTimeout   time.Duration  `json:"stopTimeout"`
	Liveness      *health.Probe  `json:"liveness,omitempty"`
	Readiness     *health.Probe  `json:"readiness,omitempty"`
	LogFile       string         `json:"logFile"`
	LogMax        int64          `json:"logMax"` // bytes before the log rotates
	StatusFile    string         `json:"statusFile"`
	Hash          string         `json:"hash"` // the effective spec, echoed in the status
	// Backoff bounds: the first restart delay and the cap (1s and 5m by default).
	BackoffMin time.Duration `json:"backoffMin,omitempty"`
	BackoffMax time.Duration `json:"backoffMax,omitempty"`
}

// The states a shim reports.
const (
	Running = "running" // the process runs
	Backoff = "backoff" // it ended; the shim waits before starting it again
	Exited  = "exited"  // it ended and the restart policy says done; the shim left
	Stopped = "stopped" // it was stopped on request; the shim left
)

// Exit is how a process ended.
type Exit struct {
	Code   int       `json:"code"`             // exit status, or -1 when killed
	Signal string    `json:"signal,omitempty"` // the signal that killed it
	Reason string    `json:"reason,omitempty"` // e.g. "liveness probe failed: …"
	Time   time.Time `json:"time"`
}

// Failed reports whether the exit was a failure.
func (e *Exit) Failed() bool { return e != nil && (e.Code != 0 || e.Signal != "") }

func (e *Exit) String() string {
	if e == nil {
		return ""
	}
	s := "exited with code " + strconv.Itoa(e.Code)
	if e.Signal != "" {
		s = "killed by " + e.Signal
	}
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	return s
}

// Status is what a shim reports, rewritten atomically on every change.
type Status struct {
	Shim        Identity  `json:"shim"`
	Hash        string    `json:"hash"`
	State       string    `json:"state"`
	Process     Identity  `json:"process"`
	Started     time.Time `json:"started,omitzero"`
	Ready       bool      `json:"ready"`
	Restarts    int       `json:"restarts"`
	LastExit    *Exit     `json:"lastExit,omitempty"`
	NextRestart time.Time `json:"nextRestart,omitzero"`
	Message     string    `json:"message,omitempty"` // why it is unhealthy or could not start
}

// ReadStatus reads a status file; a missing one is (nil, nil).
func ReadStatus(file string) (*Status, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s := &Status{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, err
	}
	return s, nil
}

// writeStatus replaces the status file atomically. It is not fsynced: it
// describes running processes, which a power loss ends anyway.
func writeStatus(file string, s *Status) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// Files are where a process's log and status live under the state dir.
func Files(stateDir, name string) (logFile, statusFile string) {
	return filepath.Join(stateDir, "logs", name+".log"), filepath.Join(stateDir, "procs", name+".json")
}
