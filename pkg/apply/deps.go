package apply

import (
	"encoding/json"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// A resource that left Git is no longer in the desired set, so what it
// depended on must come from the snapshot: prune needs it to stop a process
// before the directory it serves goes. recordDeps and recordedDeps are the
// only two places that know where the snapshot keeps it.
//
// The intended home is a field of state.Entry:
//
//	// DependsOn is what the resource came after when last applied.
//	DependsOn []string `json:"dependsOn,omitempty"`
//
// with recordDeps setting it and recordedDeps reading it. Until that field
// exists, the list rides in Entry.Extra under depsKey; every driver decodes
// Extra into its own struct, which ignores keys it does not know.
const depsKey = "dependsOn"

// recordDeps notes on e what its resource depends on.
func recordDeps(e *state.Entry, deps []resource.ID) {
	x := map[string]json.RawMessage{}
	if len(e.Extra) > 0 && json.Unmarshal(e.Extra, &x) != nil {
		return // not an object: not ours to rewrite
	}
	if len(deps) == 0 {
		if _, ok := x[depsKey]; !ok {
			return
		}
		delete(x, depsKey)
	} else {
		x[depsKey], _ = json.Marshal(deps)
	}
	if len(x) == 0 {
		e.Extra = nil
		return
	}
	e.Extra, _ = json.Marshal(x)
}

// recordedDeps is what e's resource depended on when it was last applied;
// nil for entries recorded before dependencies were.
func recordedDeps(e *state.Entry) []resource.ID {
	var x struct {
		Deps []resource.ID `json:"dependsOn"`
	}
	if len(e.Extra) > 0 {
		json.Unmarshal(e.Extra, &x)
	}
	return x.Deps
}
