//go:build !crash

package reconcile

// killPoint names a step of a revision's life between two of its records.
// The crash suite's build (-tags crash) makes the process SIGKILL itself
// there when CORTEX_SYNC_KILL_AT names the step (killpoint_crash.go);
// in every other build it is nothing.
func killPoint(string) {}
