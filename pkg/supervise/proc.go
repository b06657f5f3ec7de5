//go:build linux

package supervise

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

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
	if id.PID <= 1 || !id.Alive() {
		return os.ErrProcessDone
	}
	return syscall.Kill(-id.PID, sig)
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

// watch reports on the returned channel when this process, which need not
// be a child, has exited: a pidfd turns readable then. stop ends the watch.
func (id Identity) watch() (gone <-chan struct{}, stop func(), err error) {
	fd, err := unix.PidfdOpen(id.PID, 0)
	if err != nil {
		return nil, nil, err
	}
	if !id.Alive() {
		unix.Close(fd)
		ch := make(chan struct{})
		close(ch)
		return ch, func() {}, nil
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	ch := make(chan struct{})
	go func() {
		defer unix.Close(fd)
		defer unix.Close(wake)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(wake), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, -1)
			if err == unix.EINTR {
				continue
			}
			if fds[0].Revents != 0 {
				close(ch)
			}
			return
		}
	}()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			var one = [8]byte{1}
			unix.Write(wake, one[:])
		})
	}, nil
}

// StartTime is when this process started, from its start time in clock
// ticks since boot; zero when unknown.
func (id Identity) StartTime() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil || id.Start == 0 {
		return time.Time{}
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			boot, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return time.Time{}
			}
			const ticks = 100 // USER_HZ, fixed at 100 for userspace on Linux
			return time.Unix(boot, 0).Add(time.Duration(id.Start) * time.Second / ticks)
		}
	}
	return time.Time{}
}
