package supervise

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Identity names one process for good: a pid alone is reused, a pid with
// the kernel's start time (clock ticks since boot) is not.
type Identity struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// procStat reads a process's state letter and start time from
// /proc/<pid>/stat. The command name may hold spaces and parentheses, so
// fields are counted after the last ')'.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, errors.New("malformed /proc stat")
	}
	fields := bytes.Fields(b[i+2:])
	// After ")": state is field 3 of stat(5), starttime field 22.
	if len(fields) < 20 {
		return 0, 0, errors.New("short /proc stat")
	}
	start, err = strconv.ParseUint(string(fields[19]), 10, 64)
	return fields[0][0], start, err
}

// Self is the calling process's identity.
func Self() Identity { return Of(os.Getpid()) }

// Of is the identity of a live pid (zero when it is gone).
func Of(pid int) Identity {
	_, start, err := procStat(pid)
	if err != nil {
		return Identity{}
	}
	return Identity{PID: pid, Start: start}
}

// Alive reports whether this very process still runs: the pid exists, has
// the recorded start time, and is not a zombie (an exited process whose
// parent has not reaped it).
func (id Identity) Alive() bool {
	if id.PID <= 0 {
		return false
	}
	state, start, err := procStat(id.PID)
	return err == nil && start == id.Start && state != 'Z' && state != 'X'
}

// Signal sends sig to this very process: through a pidfd opened first and
// checked against the start time, so a reused pid is never signalled.
func (id Identity) Signal(sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(id.PID, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if !id.Alive() {
		return os.ErrProcessDone
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0)
}

// SignalGroup sends sig to the process group this process leads, after
// checking that the leader is still the one recorded.
func (id Identity) SignalGroup(sig syscall.Signal) error {
	if !id.Alive() {
		return os.ErrProcessDone
	}
	return syscall.Kill(-id.PID, sig)
}

// groupAlive reports whether any process is left in the group.
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}

// WaitGone polls until the process has gone (or is a zombie) or the
// timeout passes.
func (id Identity) WaitGone(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for id.Alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
