package supervise

import (
	"errors"
	"path/filepath"
	"strings"
	"time"
)

// A singleton's fence. A Process that is a singleton runs on one host of a
// fleet at a time: the host whose agent holds it in etcd. That agent
// writes the fence, procs/NAME.fence, on every renewal of its lease: the
// time on CLOCK_BOOTTIME until which the process may run, and the time by
// which it must be gone. The supervisor runs the process only while the
// fence is valid, and stops it when the fence passes unless it was renewed
// — whether or not the agent still runs: an agent SIGKILLed renews
// nothing, and its singleton stops on the fence's clock all the same. A
// host that does not hold the singleton has a fence that says who does;
// a host with no fence at all is in no fleet, and runs no singleton.

// Fence is what the holder's agent gives the supervisor of a singleton.
type Fence struct {
	// Boot is the boot ID (/proc/sys/kernel/random/boot_id) the times are
	// of: CLOCK_BOOTTIME starts again at every boot, so a fence of another
	// boot is void.
	Boot string `json:"boot"`
	// Deadline is on CLOCK_BOOTTIME: the process may run until then; from
	// then on it is stopped (its stop signal).
	Deadline time.Duration `json:"deadline"`
	// KillBy is on CLOCK_BOOTTIME: the process and its tree are gone by
	// then (SIGKILL), whatever its stop timeout says. It is before another
	// host can hold the singleton.
	KillBy time.Duration `json:"killBy"`
	// Holder is the host that holds the singleton ("" when unknown).
	Holder string `json:"holder,omitempty"`
	// Note says why the process does not run here, when it does not:
	// another host holds it, the coordinator is unreachable, the agent
	// stopped.
	Note string `json:"note,omitempty"`
}

// Valid reports whether the fence lets the process run at now (on
// CLOCK_BOOTTIME) of boot.
func (f *Fence) Valid(now time.Duration, boot string) bool {
	return f != nil && f.Boot == boot && boot != "" && now < f.Deadline
}

// FenceFile is the fence of process name, in the state dir's procs/
// (relative to the state dir, slash-separated).
func FenceFile(name string) string { return "procs/" + name + ".fence" }

// ReadFence reads the fence of process name; nil, and no error, when
// there is none.
func ReadFence(stateDir, name string) (*Fence, error) {
	f := &Fence{}
	if ok, err := readJSON(filepath.Join(stateDir, filepath.FromSlash(FenceFile(name))), f); !ok {
		return nil, err
	}
	return f, nil
}

// ErrOutlive says the agent leaves supervision to the re-executed
// supervisor: a singleton's fence must hold when the agent is SIGKILLed,
// so its supervisor must outlive the agent.
var ErrOutlive = errors.New("a supervisor that outlives the agent is needed")

// HasSingleton reports whether a spec in the state dir is a singleton's.
func HasSingleton(stateDir string) bool {
	procs := filepath.Join(stateDir, "procs")
	entries, _ := readDir(procs)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".spec") {
			continue
		}
		if s, err := readSpec(filepath.Join(procs, e.Name())); err == nil && s != nil && s.Singleton {
			return true
		}
	}
	return false
}
