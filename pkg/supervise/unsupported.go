//go:build !linux

package supervise

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
)

// Elsewhere than Linux the CLI builds for validate, diff and plans, but
// supervision stands on Linux process APIs (pidfd, a child subreaper,
// cgroups, /proc): starting a process says so, and nothing is ever found
// running.

// CgroupEnv names the cgroup to place processes under (Linux only).
const CgroupEnv = "CORTEX_SYNC_CGROUP"

var errUnsupported = fmt.Errorf("supervising processes needs Linux; this is %s", runtime.GOOS)

// Of is the identity of a live pid: none can be known here.
func Of(int) Identity { return Identity{} }

// Self is the calling process's identity: none can be known here.
func Self() Identity { return Identity{} }

// Alive is false: no process's identity can be known here.
func (Identity) Alive() bool { return false }

// Signal cannot reach a process by identity here.
func (Identity) Signal(syscall.Signal) error { return errUnsupported }

// SignalGroup cannot reach a process group by identity here.
func (Identity) SignalGroup(syscall.Signal) error { return errUnsupported }

// WaitGone has nothing to wait for.
func (Identity) WaitGone(time.Duration) bool { return true }

// StartTime is unknown here.
func (Identity) StartTime() time.Time { return time.Time{} }

// Run cannot start a process here.
func Run(string, Spec) (*Status, error) { return nil, errUnsupported }

// Restart cannot restart a process here.
func Restart(string, string) (*Status, error) { return nil, errUnsupported }

// Hold cannot stop a process here.
func Hold(string, string) (*Status, error) { return nil, errUnsupported }

// Release cannot start a process here.
func Release(string, string) (*Status, error) { return nil, errUnsupported }

// Settle has nothing to wait for here.
func Settle(context.Context, string, string, time.Duration) (*Status, bool, error) {
	return nil, false, errUnsupported
}

// Read finds the status a Linux host left in the state dir, if any.
func Read(stateDir, name string) (*Status, error) {
	_, statusFile := Files(stateDir, name)
	return ReadStatus(statusFile)
}

// Remove has nothing to stop here; it forgets nothing either.
func Remove(string, string, syscall.Signal, time.Duration) error {
	return errUnsupported
}

// StopAll has nothing to stop here.
func StopAll(string) {}

// CgroupBase: no cgroups here.
func CgroupBase(string) (dir, why string) { return "", "cgroups need Linux" }

// RunShim is the supervisor's entry: it cannot run here.
func RunShim([]string) int {
	fmt.Fprintln(os.Stderr, errUnsupported)
	return 2
}

// RunAsInit: cortex-sync is never an init here.
func RunAsInit([]string) (int, bool) { return 0, false }

// ErrNoContainment: the agent does not host the supervisor here.
var ErrNoContainment = errUnsupported

// Host is the agent's in-process supervisor: none here.
type Host struct{}

// NewHost cannot supervise here.
func NewHost(string) (*Host, error) { return nil, errUnsupported }

// Handover has nothing to hand over.
func (*Host) Handover() error { return nil }

// BootTime: no CLOCK_BOOTTIME here; no fence is ever valid.
func BootTime() time.Duration { return 0 }

// BootID: no boot ID here; no fence is ever valid.
func BootID() string { return "" }
