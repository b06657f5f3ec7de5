// Package supervise runs supervised processes. One supervisor per state
// dir, cortex-sync re-executed in a hidden mode in a session of its own, is
// the parent of every process: it reaps them and knows how they ended,
// restarts them (at once after a long run, with backoff after quick
// failures, Failed after a start limit), runs the probes, caps the logs
// and reports each process in a status file. Processes outlive it: their
// output goes straight to their log files, and a new supervisor adopts
// them by identity (pid and start time), never running two copies.
package supervise

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/health"
)

// ShimArg is the hidden first argument that makes cortex-sync a supervisor.
const ShimArg = "__shim"

// RestartPolicy says whether a process that ended is started again.
type RestartPolicy string

// The restart policies.
const (
	Always    RestartPolicy = "Always"    // whatever the exit
	OnFailure RestartPolicy = "OnFailure" // after a non-zero exit or a signal
	Never     RestartPolicy = "Never"

	// DefaultRestartPolicy is the policy of a Process that names none.
	DefaultRestartPolicy = Always
)

// RestartPolicies lists the policies, for validation.
var RestartPolicies = []string{string(Always), string(OnFailure), string(Never)}

// OrDefault is the policy, or the default when none is given.
func (p RestartPolicy) OrDefault() RestartPolicy {
	if p == "" {
		return DefaultRestartPolicy
	}
	return p
}

// Restarts reports whether a process that ended so is started again.
func (p RestartPolicy) Restarts(e *Exit) bool {
	switch p.OrDefault() {
	case Always:
		return true
	case OnFailure:
		return e.Failed()
	}
	return false
}

// Backoff is how a process that keeps failing is restarted: a run of at
// least MinUptime resets everything and the next start is immediate; a
// shorter run is a quick failure, after which the wait doubles from Delay
// up to MaxDelay; StartLimit quick failures in a row make it Failed.
type Backoff struct {
	MinUptime  time.Duration `json:"minUptime,omitempty"`  // default 10s
	Delay      time.Duration `json:"delay,omitempty"`      // default 1s
	MaxDelay   time.Duration `json:"maxDelay,omitempty"`   // default 1m
	StartLimit int           `json:"startLimit,omitempty"` // default 5
}

// The backoff defaults.
const (
	DefaultMinUptime  = 10 * time.Second
	DefaultDelay      = time.Second
	DefaultMaxDelay   = time.Minute
	DefaultStartLimit = 5
)

// WithDefaults fills in what is not set.
func (b Backoff) WithDefaults() Backoff {
	if b.MinUptime <= 0 {
		b.MinUptime = DefaultMinUptime
	}
	if b.Delay <= 0 {
		b.Delay = DefaultDelay
	}
	if b.MaxDelay <= 0 {
		b.MaxDelay = DefaultMaxDelay
	}
	if b.MaxDelay < b.Delay {
		b.MaxDelay = b.Delay
	}
	if b.StartLimit <= 0 {
		b.StartLimit = DefaultStartLimit
	}
	return b
}

// Next says what follows a run that lasted ran, after quick quick failures
// in a row: the wait before the next start, the new count of quick
// failures, and whether the start limit is reached (Failed).
func (b Backoff) Next(ran time.Duration, quick int) (wait time.Duration, n int, failed bool) {
	b = b.WithDefaults()
	if ran >= b.MinUptime {
		return 0, 0, false
	}
	n = quick + 1
	if n >= b.StartLimit {
		return 0, n, true
	}
	wait = b.Delay
	for i := 1; i < n && wait < b.MaxDelay; i++ {
		wait *= 2
	}
	return min(wait, b.MaxDelay), n, false
}

// Resources are the limits put on a process's cgroup, where the
// controllers are available. Zero means no limit.
type Resources struct {
	Memory   int64 `json:"memory,omitempty"`   // bytes (memory.max)
	MilliCPU int64 `json:"milliCPU,omitempty"` // thousandths of a core (cpu.max)
	Tasks    int64 `json:"tasks,omitempty"`    // processes and threads (pids.max)
}

// Spec is what the supervisor runs for one process, written by whoever
// starts it (sync, the agent, an operator's verb) to procs/<name>.spec
// before anything starts: the intent, which survives the starter.
type Spec struct {
	ID      string   `json:"id"`
	Name    string   `json:"name"`
	Command []string `json:"command"`
	Env     []string `json:"env"`
	// SecretEnv maps variables to the host files (--root resolved) the
	// supervisor reads their values from as it starts the process; the
	// values are never written here.
	SecretEnv map[string]string `json:"secretEnv,omitempty"`
	// SecretEnvFile is a SOPS dotenv file the supervisor decrypts as it
	// starts the process: each variable is a secret as SecretEnv's are.
	SecretEnvFile *SOPSEnv       `json:"secretEnvFile,omitempty"`
	Dir           string         `json:"dir,omitempty"`
	UID           int            `json:"uid"` // -1: as the supervisor
	GID           int            `json:"gid"`
	RestartPolicy RestartPolicy  `json:"restartPolicy"`
	Backoff       Backoff        `json:"backoff"`
	StopSignal    syscall.Signal `json:"stopSignal"`
	StopTimeout   time.Duration  `json:"stopTimeout"`
	Liveness      *health.Probe  `json:"liveness,omitempty"`
	Readiness     *health.Probe  `json:"readiness,omitempty"`
	LogFile       string         `json:"logFile"`
	LogMax        int64          `json:"logMax"` // bytes before the log rotates
	Hash          string         `json:"hash"`   // the effective spec, echoed in the status
	// Cgroup is the cgroup v2 directory to run it in; empty when there is
	// no writable cgroup v2 hierarchy (the process group then).
	Cgroup string `json:"cgroup,omitempty"`
	// NoCgroup says why there is none, for the status.
	NoCgroup  string    `json:"noCgroup,omitempty"`
	Resources Resources `json:"resources"`
	// Singleton: the process runs only while its fence (fence.go) is
	// valid, and is stopped when the fence passes.
	Singleton bool `json:"singleton,omitempty"`

	// Control fields, set by the starter.
	Gen        uint64 `json:"gen"`        // new on every write; the status acknowledges it
	RestartGen uint64 `json:"restartGen"` // changed to restart it now, resetting Failed
	Hold       bool   `json:"hold"`       // stopped by the operator until released
}

// Tag is the value of CORTEX_SYNC_UNIT in a process's environment: it
// finds a process tree that escaped its group when there is no cgroup.
func (s *Spec) Tag() string { return tagFor(filepath.Dir(filepath.Dir(s.LogFile)), s.Name) }

func tagFor(stateDir, name string) string { return stateHash(stateDir) + "/" + name }

// State is where a supervised process is in its life.
type State string

// The states a status reports.
const (
	Starting   State = "starting" // the supervisor took it on and is starting it
	Running    State = "running"  // the process runs
	BackingOff State = "backoff"  // it ended; the supervisor waits before starting it again
	Exited     State = "exited"   // it ended and the restart policy says done
	Failed     State = "failed"   // it failed StartLimit times in a row, or could not start: final
	Held       State = "held"     // stopped by the operator (cortex-sync stop) until started
	Stopped    State = "stopped"  // stopped on request (its spec was removed)
	// Standby: a singleton whose fence is not valid here (another host
	// holds it, or none does yet); it starts once the fence is valid.
	Standby State = "standby"
)

// Final reports a state in which nothing runs and nothing will until the
// spec changes.
func (s State) Final() bool {
	return s == Exited || s == Failed || s == Held || s == Stopped
}

// Exit is how a process ended.
type Exit struct {
	Code   int       `json:"code"`             // exit status, or -1 when killed or unknown
	Signal string    `json:"signal,omitempty"` // the signal that killed it
	Reason string    `json:"reason,omitempty"` // e.g. "liveness probe … failed 3 times in a row: …"
	Time   time.Time `json:"time"`
	// Unknown: it was adopted (its first supervisor died), so its exit
	// status could not be read.
	Unknown bool `json:"unknown,omitempty"`
	// Liveness: the supervisor stopped it because its liveness probe failed.
	Liveness bool `json:"liveness,omitempty"`
	// unborn: it died before it ran its program (see waited).
	unborn bool
	// fenced: the supervisor stopped it at its fence: no failure, and no
	// restart until the fence is valid again.
	fenced bool
}

// Failed reports whether the exit was a failure; an unknown one counts.
func (e *Exit) Failed() bool { return e != nil && (e.Code != 0 || e.Signal != "" || e.Unknown) }

func (e *Exit) String() string {
	if e == nil {
		return ""
	}
	s := "exited with code " + strconv.Itoa(e.Code)
	switch {
	case e.Unknown:
		s = "ended (exit status unknown: it was adopted)"
	case e.Signal != "":
		s = "killed by " + e.Signal
	}
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	return s
}

// Status is what the supervisor reports of one process, rewritten
// atomically on every change.
type Status struct {
	Shim       Identity  `json:"shim"` // the supervisor
	Gen        uint64    `json:"gen"`  // the spec generation this reports on
	RestartGen uint64    `json:"restartGen"`
	Hash       string    `json:"hash"`
	State      State     `json:"state"`
	Process    Identity  `json:"process"`
	Started    time.Time `json:"started,omitzero"`
	Ready      bool      `json:"ready"`
	Restarts   int       `json:"restarts"`
	// QuickExits counts the quick failures in a row (runs shorter than
	// minUptime); StartLimit of them make it Failed.
	QuickExits  int       `json:"quickExits,omitempty"`
	LastExit    *Exit     `json:"lastExit,omitempty"`
	NextRestart time.Time `json:"nextRestart,omitzero"`
	// Message says why a running process is unhealthy (its readiness
	// probe failing after it passed).
	Message string `json:"message,omitempty"`
	// Probe is the readiness probe's last error while it is not ready.
	Probe string `json:"probe,omitempty"`
	// StartError: the program could not be started at all (not found, not
	// executable, no working directory). The state is then Failed.
	StartError string `json:"startError,omitempty"`
	// Containment says what holds the process tree: a cgroup or, where
	// none can be made, its process group.
	Containment string `json:"containment,omitempty"`
	Adopted     bool   `json:"adopted,omitempty"`
	// Holder is, for a singleton, the host that holds it as its fence
	// says; NoFence: there is no fence at all (no agent of a fleet runs
	// on this state dir), so a singleton never starts.
	Holder  string `json:"holder,omitempty"`
	NoFence bool   `json:"noFence,omitempty"`
	// How to stop what it records, for whoever has to without the spec.
	Cgroup      string         `json:"cgroup,omitempty"`
	StopSignal  syscall.Signal `json:"stopSignal,omitempty"`
	StopTimeout time.Duration  `json:"stopTimeout,omitempty"`
}

// Supervised reports whether the supervisor that wrote the status still
// runs and is responsible for the process.
func (s *Status) Supervised() bool {
	return s != nil && !s.State.Final() && s.Shim.Alive()
}

// ReadStatus reads a status file; a missing one is (nil, nil).
func ReadStatus(file string) (*Status, error) {
	s := &Status{}
	if ok, err := readJSON(file, s); !ok {
		return nil, err
	}
	return s, nil
}

// readSpec reads a spec file; a missing one is (nil, nil).
func readSpec(file string) (*Spec, error) {
	s := &Spec{}
	if ok, err := readJSON(file, s); !ok {
		return nil, err
	}
	return s, nil
}

func readJSON(file string, v any) (bool, error) {
	b, err := readFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, err
	}
	return true, nil
}

// writeJSON replaces a file atomically. It is not fsynced: specs and
// statuses describe running processes, which a power loss ends anyway.
func writeJSON(file string, v any) error { return putJSON(file, v, true) }

// Files are where a process's log and status live under the state dir.
func Files(stateDir, name string) (logFile, statusFile string) {
	return filepath.Join(stateDir, "logs", name+".log"), filepath.Join(stateDir, "procs", name+".json")
}

// The supervisor's own files in procs/: names of processes are RFC 1123
// labels, so dot files never collide with them.
const (
	shimFile = ".shim" // the live supervisor's identity
	lockFile = ".lock" // held by the live supervisor
)

func specFile(procs, name string) string   { return filepath.Join(procs, name+".spec") }
func statusFile(procs, name string) string { return filepath.Join(procs, name+".json") }

// stateHash names a state dir in a few characters, for cgroup names.
func stateHash(stateDir string) string {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		abs = stateDir
	}
	h := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(h[:4])
}
