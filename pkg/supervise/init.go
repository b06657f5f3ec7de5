//go:build linux

package supervise

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// initEnv marks the child that a pid-1 cortex-sync runs.
const initEnv = "CORTEX_SYNC_INIT_CHILD"

// RunAsInit makes cortex-sync, when it is pid 1 (a container's entrypoint),
// a minimal init, as tini does: it runs itself as its only child with the
// same arguments, forwards signals to it, reaps every orphan the host hands
// it, and exits with the child's status. ok is false when not pid 1.
// Reaping in the process that also waits for its own children would race
// with those waits; a separate init cannot.
func RunAsInit(args []string) (code int, ok bool) {
	if os.Getpid() != 1 || os.Getenv(initEnv) != "" {
		return 0, false
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), initEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		os.Stderr.WriteString("cortex-sync: " + err.Error() + "\n")
		return 1, true
	}
	child := cmd.Process.Pid
	for {
		select {
		case s := <-sigs:
			cmd.Process.Signal(s)
		case <-chld:
			for {
				var ws unix.WaitStatus
				pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
				if pid == child {
					if ws.Signaled() {
						return 128 + int(ws.Signal()), true
					}
					return ws.ExitStatus(), true
				}
			}
		}
	}
}
