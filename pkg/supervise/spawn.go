//go:build linux

package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reaper is the one place that waits for the supervisor's children: the
// supervised processes, the exec probes, the redactors. A child is
// registered under the lock the reaper takes, between its fork and any
// chance to reap it, so no exit status ever goes to the wrong waiter.
//
// The re-executed supervisor is a child subreaper and reaps every child
// (all), orphans of the process trees included. In the agent, other code
// waits for its own children (a Command's os/exec waits on its pid), so
// there the reaper waits for the pids it registered only, and never
// takes another waiter's exit status.
type reaper struct {
	all     bool
	mu      sync.Mutex
	waiters map[int]*waiter
	comm    string // this process's name, which a child has until it execs
}

// waiter is a registered child: its exit arrives on ch.
type waiter struct {
	ch   chan waited
	comm string // the name it has once it has exec'd; "" when it is ours too
}

// waited is how a child ended. unborn: it died before it ran its program
// (still under the supervisor's name, never exec'd).
type waited struct {
	ws     unix.WaitStatus
	unborn bool
}

func newReaper(all bool) *reaper {
	comm, _ := os.ReadFile("/proc/self/comm")
	return &reaper{all: all, waiters: map[int]*waiter{}, comm: strings.TrimSpace(string(comm))}
}

// forkExec starts a child; its exit status arrives on the channel. Its
// identity is read before anyone can reap it.
func (r *reaper) forkExec(path string, argv []string, attr *syscall.ProcAttr) (Identity, <-chan waited, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return Identity{}, nil, err
	}
	w := &waiter{ch: make(chan waited, 1), comm: commOf(path)}
	if w.comm == r.comm {
		w.comm = "" // its name cannot tell whether it exec'd
	}
	r.waiters[pid] = w
	id := Of(pid)
	if id.PID == 0 {
		id.PID = pid
	}
	return id, w.ch, nil
}

// commOf is the name the kernel gives a process that execs path (its base
// name, cut at 15 bytes).
func commOf(path string) string {
	base := path[strings.LastIndexByte(path, '/')+1:]
	return base[:min(len(base), 15)]
}

// reap collects the children that exited, on SIGCHLD: every one, or
// only those registered.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid, w := range r.waiters {
		if r.collect(pid, w) {
			delete(r.waiters, pid)
		}
	}
	if !r.all {
		return
	}
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if w, ok := r.waiters[pid]; ok { // it ended since collect looked
			w.ch <- waited{ws: ws}
			delete(r.waiters, pid)
		}
	}
}

// collect reaps pid if it has exited, telling whether it did. Before
// reaping, it reads the zombie's name: a child still named as the
// supervisor died before it ran its program.
func (r *reaper) collect(pid int, w *waiter) bool {
	unborn := false
	if w.comm != "" {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err == nil && info.Signo != 0 {
			comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
			unborn = strings.TrimSpace(string(comm)) == r.comm
		}
	}
	var ws unix.WaitStatus
	got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	for err == unix.EINTR {
		got, err = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
	if got != pid {
		return false
	}
	w.ch <- waited{ws: ws, unborn: unborn}
	return true
}

// exitOf turns a wait status into an Exit.
func exitOf(w waited) *Exit {
	ws := w.ws
	e := &Exit{Code: ws.ExitStatus(), Time: time.Now().UTC()}
	if ws.Signaled() {
		e.Code, e.Signal = -1, unix.SignalName(ws.Signal())
	}
	e.unborn = w.unborn
	return e
}

// procAttr is how a spec's programs run: its user, environment (with the
// unit's tag) and directory, in a process group of their own.
func procAttr(spec *Spec, files []uintptr) *syscall.ProcAttr {
	sys := &syscall.SysProcAttr{Setpgid: true}
	if spec.UID >= 0 {
		sys.Credential = &syscall.Credential{Uid: uint32(spec.UID), Gid: uint32(max(spec.GID, 0)), NoSetGroups: false}
	}
	env := append(append([]string(nil), spec.Env...), "CORTEX_SYNC_UNIT="+spec.Tag())
	return &syscall.ProcAttr{Dir: spec.Dir, Env: env, Files: files, Sys: sys}
}

// runProbe runs an exec probe's command the way the process runs: as its
// user, with its environment and PATH, in its working directory. Its
// process group is killed when ctx ends.
func (r *reaper) runProbe(ctx context.Context, spec *Spec, argv []string) ([]byte, error) {
	path, err := LookPath(argv[0], spec.Env)
	if err != nil {
		return nil, fmt.Errorf("%s: not found in PATH %s", argv[0], envPath(spec.Env))
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	secrets, err := loadSecrets(spec)
	if err != nil {
		return nil, err
	}
	redact := NewRedactor(secrets)
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	attr := procAttr(spec, []uintptr{devnull.Fd(), pw.Fd(), pw.Fd()})
	attr.Env = append(attr.Env, secretEnv(secrets)...)
	id, exited, err := r.forkExec(path, argv, attr)
	pid := id.PID
	pw.Close()
	if err != nil {
		return nil, err
	}
	out := make(chan []byte, 1)
	go func() {
		var b, pending []byte
		buf := make([]byte, 4096)
		for {
			n, err := pr.Read(buf)
			var clean []byte
			// Redacted as it streams, before the window cuts it: a cut
			// could fall inside a secret.
			clean, pending = redact.next(append(pending, buf[:n]...), err != nil)
			b = append(b, clean...)
			if len(b) > 4096 {
				b = b[len(b)-4096:]
			}
			if err != nil {
				out <- b
				return
			}
		}
	}()
	var w waited
	select {
	case w = <-exited:
	case <-ctx.Done():
		select {
		case w = <-exited:
		default:
			// Not reaped yet, so its pid (its group's id) is not reused.
			killGroup(pid, syscall.SIGKILL)
			w = <-exited
		}
	}
	ws := w.ws
	// Whatever it left holding the pipe does not hold the probe up.
	pr.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	b := <-out
	switch {
	case ctx.Err() != nil:
		return b, ctx.Err()
	case ws.Signaled():
		return b, errors.New("killed by " + unix.SignalName(ws.Signal()))
	case ws.ExitStatus() != 0:
		return b, fmt.Errorf("exit status %d", ws.ExitStatus())
	}
	return b, nil
}

func envPath(env []string) string {
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			return p
		}
	}
	return "(none)"
}
