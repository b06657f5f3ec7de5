package hostfs

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A temp file's name says which process writes it: its pid and, where the
// system tells when a process started (Linux's /proc), a token of the boot
// and the start time, so that a process that got the pid later, in this
// boot or the next, is never taken for the writer. A temp is its writer's
// until that process ends; then nothing will ever rename or remove it, and
// it is swept by whoever opens the directory next (Abandoned). No age
// enters the rule: a live writer can be stopped (SIGSTOP) or stalled as
// long as it likes, and its temp is still its own.
//
// The rule holds for the writers of one pid namespace: a cortex-sync in a
// container with a pid namespace of its own must not share a directory
// with one outside.

// writer is what a temp file's name says of the process that made it.
type writer struct {
	pid   int
	token string // "" in a name made without /proc, or by an older version
}

// parseTemp reads the writer out of a temp file's name:
// tempPrefix, pid, "-", [token, "."], sequence number, "-", base. It
// returns the rest of the name after the writer, and false for a name
// tempName did not make.
func parseTemp(name string) (w writer, base string, ok bool) {
	rest, ok := strings.CutPrefix(name, tempPrefix)
	if !ok {
		return writer{}, "", false
	}
	pid, rest, ok := strings.Cut(rest, "-")
	if !ok || pid == "" || strings.Trim(pid, "0123456789") != "" {
		return writer{}, "", false
	}
	seq, rest, ok := strings.Cut(rest, "-")
	if !ok {
		return writer{}, "", false
	}
	token, seq, hasToken := strings.Cut(seq, ".")
	if !hasToken {
		token, seq = "", token
	}
	if seq == "" || !base36(seq) || (hasToken && (token == "" || !base36(token))) {
		return writer{}, "", false
	}
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return writer{}, "", false
	}
	return writer{pid: n, token: token}, rest, true
}

func base36(s string) bool { return strings.Trim(s, "0123456789abcdefghijklmnopqrstuvwxyz") == "" }

// self is this process as a temp file's name gives it.
var self = sync.OnceValue(func() writer {
	pid := os.Getpid()
	w := writer{pid: pid}
	if p, ok := readProc(pid); ok {
		w.token = p.token
	}
	return w
})

// Abandoned reports whether name is a temp file of ours whose writer is
// gone: the process its name gives has ended (or is a zombie), or its pid
// is now another process's (the token differs). A temp file of ours whose
// name gives no pid (an older version's) is abandoned; one whose writer
// cannot be told apart from a live process (a name without a token, on a
// pid that is alive) is not. A temp file this process writes is never
// abandoned. Whatever is not a temp file of ours is not.
func Abandoned(name string) bool {
	if !IsTemp(name) {
		return false
	}
	w, _, ok := parseTemp(name)
	return !ok || w.gone()
}

// mine reports whether this process made the temp file name.
func (w writer) mine() bool {
	s := self()
	return w.pid == s.pid && (w.token == s.token || w.token == "")
}

// gone reports whether the writer has ended.
func (w writer) gone() bool {
	if w.mine() {
		return false
	}
	p, ok := readProc(w.pid)
	if !ok {
		// No /proc entry (or none at all, off Linux): a signal 0 tells
		// whether the pid is taken, and EPERM means it is.
		return errors.Is(unix.Kill(w.pid, 0), unix.ESRCH)
	}
	return p.dead || (w.token != "" && p.token != "" && p.token != w.token)
}

// proc is what /proc says of a live pid.
type proc struct {
	dead  bool   // a zombie: it has ended, its parent has not reaped it
	token string // of the boot and the start time; "" when unknown
}

// bootID names this boot of the machine.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
})

// readProc reads /proc/<pid>/stat; false when there is no such entry.
func readProc(pid int) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses,
	// so the fields are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return proc{}, false
	}
	p := proc{dead: f[0] == "Z" || f[0] == "X" || f[0] == "x"}
	// starttime, field 22: clock ticks since boot. A pid is reused only
	// by a process started later, so boot and start time name one
	// process.
	if boot := bootID(); boot != "" {
		sum := sha256.Sum256([]byte(boot + " " + f[19]))
		p.token = strconv.FormatUint(binary.BigEndian.Uint64(sum[:8])>>24, 36) // 40 bits
	}
	return p, true
}

// RemoveAbandoned removes the temp files of ours in the directory whose
// writer is gone (Abandoned) and reports how many; a live writer's,
// another process's or this one's, stays. It is safe beside writers of
// other processes, and is how a directory's owner sweeps it when it opens
// it.
func (d *Dir) RemoveAbandoned() (int, error) {
	return d.removeTemps(Abandoned)
}

// removeTemps removes the regular files and symlinks of the directory
// whose names sweep says to, and reports how many it removed.
func (d *Dir) removeTemps(sweep func(name string) bool) (int, error) {
	entries, err := d.ReadDir()
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs []error
	for _, e := range entries {
		if t := e.Type(); (!t.IsRegular() && t&fs.ModeSymlink == 0) || !sweep(e.Name()) {
			continue
		}
		switch err := unix.Unlinkat(d.fd, e.Name(), 0); err {
		case nil:
			removed++
		case unix.ENOENT:
		default:
			errs = append(errs, d.pathErr("remove", e.Name(), err))
		}
	}
	return removed, errors.Join(errs...)
}
