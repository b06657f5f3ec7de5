//go:build linux

package supervise

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// stopTree stops a process and everything it started: sig to every
// process in its cgroup and to its process group, then, after timeout,
// SIGKILL to all of them (cgroup.kill; without a cgroup, the group and
// every process carrying its tag). wait, when given, waits for the main
// process (a child, whose exit status it takes); else it is polled.
func stopTree(main Identity, cg cgroup, tag string, sig syscall.Signal, timeout time.Duration, wait func(time.Duration) bool) {
	if wait == nil {
		wait = main.WaitGone
	}
	deadline := time.Now().Add(timeout)
	if cg != "" {
		cg.signal(sig)
	} else {
		signalStrays(tag, sig)
	}
	main.SignalGroup(sig)
	gone := wait(timeout)
	if cg != "" {
		if !cg.waitEmpty(time.Until(deadline)) {
			cg.kill(5 * time.Second)
		}
	} else {
		for (groupAlive(main.PID) || len(strays(tag)) > 0) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		killGroup(main.PID, syscall.SIGKILL)
		killStrays(tag, 5*time.Second)
	}
	if !gone {
		killGroup(main.PID, syscall.SIGKILL)
		wait(5 * time.Second)
	}
}

// killGroup signals a process group. A pgid of 0 or 1 would signal the
// caller's own group or every process there is: never.
func killGroup(pgid int, sig syscall.Signal) {
	if pgid > 1 {
		syscall.Kill(-pgid, sig)
	}
}

// groupAlive reports whether any process is left in the group.
func groupAlive(pgid int) bool {
	return pgid > 1 && syscall.Kill(-pgid, 0) == nil
}

// strays lists the live processes whose environment carries the tag
// CORTEX_SYNC_UNIT=tag: a process tree that left its process group
// (setsid) still carries it, unless it cleared its environment. Only
// used where there is no cgroup to tell.
func strays(tag string) []int {
	if tag == "" {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte("CORTEX_SYNC_UNIT=" + tag + "\x00")
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.HasPrefix(env, want) && !bytes.Contains(env, append([]byte{0}, want...)) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// signalStrays sends sig to every process carrying the tag.
func signalStrays(tag string, sig syscall.Signal) {
	for _, pid := range strays(tag) {
		if pid > 1 {
			syscall.Kill(pid, sig)
		}
	}
}

// killStrays SIGKILLs every process carrying the tag until none is left,
// up to timeout.
func killStrays(tag string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		pids := strays(tag)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			if pid > 1 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}
