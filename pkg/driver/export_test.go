package driver

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// HoldOps sets how many changes of a tree a plan holds as ops before a
// sync plans the tree again as it writes it; it returns the undo.
func HoldOps(n int) func() {
	was := maxHeldOps
	maxHeldOps = n
	return func() { maxHeldOps = was }
}

// LegacyHashes names a process's or command's effective hash as an older
// cortex-sync did (content IDs of a directory as "sha256:…").
func LegacyHashes(env *Env, r *resource.Resource) string {
	old := *env
	old.legacyIDs = true
	var x *Exec
	var on []resource.ID
	switch spec := r.Spec.(type) {
	case *ProcessSpec:
		x, on = &spec.Exec, spec.RestartOn
	case *CommandSpec:
		x, on = &spec.Exec, spec.RefreshOn
	}
	h, _, _ := effectiveHash(&old, r, x, on)
	return h
}

// StopMirrorAfter stops the mirror writer once it created n entries on the
// host: with kill, by a SIGKILL of this process, else by an error. It
// returns the undo.
func StopMirrorAfter(n int, kill bool) func() {
	var count atomic.Int64
	createdHook = func(rel string) error {
		if count.Add(1) < int64(n) {
			return nil
		}
		if kill {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return fmt.Errorf("stopped after %d entries created, at %s", n, rel)
	}
	return func() { createdHook = nil }
}

// SettleIntentsEvery makes the mirror's writer flush its batch every n
// files and settle the tree's intent log at every flush; it returns the
// undo.
func SettleIntentsEvery(n int) func() {
	wasBatch, wasLog := batchFiles, index.MaxIntentLog
	batchFiles, index.MaxIntentLog = n, 1
	return func() { batchFiles, index.MaxIntentLog = wasBatch, wasLog }
}

// HostListings is how many host directories mirror plans listed so far.
func HostListings() int64 { return listings.Load() }

// DesiredDigest names everything a resource's desired state holds, as
// restartOn and refreshOn see it.
var DesiredDigest = desiredDigest
