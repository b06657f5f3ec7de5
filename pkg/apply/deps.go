package apply

import (
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// A resource that left Git is no longer in the desired set, so what it
// depended on comes from the snapshot: prune needs it to stop a process
// before the directory it serves goes.

// recordDeps notes on e what its resource depends on.
func recordDeps(e *state.Entry, deps []resource.ID) {
	e.DependsOn = e.DependsOn[:0]
	for _, d := range deps {
		e.DependsOn = append(e.DependsOn, string(d))
	}
	if len(e.DependsOn) == 0 {
		e.DependsOn = nil
	}
}

// recordedDeps is what e's resource depended on when it was last applied;
// nil for entries recorded before dependencies were.
func recordedDeps(e *state.Entry) []resource.ID {
	out := make([]resource.ID, len(e.DependsOn))
	for i, d := range e.DependsOn {
		out[i] = resource.ID(d)
	}
	return out
}
