//go:build crash

package reconcile

import (
	"os"
	"syscall"
)

// killAt is the step the crash suite kills the process at.
var killAt = os.Getenv("CORTEX_SYNC_KILL_AT")

// killPoint SIGKILLs the process when the crash suite asks for this step:
// a kill between two records of a revision's life, at exactly that place,
// whichever caller drives it.
func killPoint(step string) {
	if step == killAt {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
