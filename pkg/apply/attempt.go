package apply

import (
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Attempt is what the snapshot keeps of this run: the revision tried, and
// every resource that failed or was blocked, applied before or not.
func (r *Report) Attempt(revision string, at time.Time) *state.Attempt {
	a := &state.Attempt{Revision: revision, Time: at}
	for _, res := range r.Results {
		if res.Outcome != Failed && res.Outcome != Blocked {
			continue
		}
		msg := res.Error
		if msg == "" && res.BlockedBy != "" {
			msg = "blocked: " + string(res.BlockedBy) + " did not apply"
		}
		a.Failed = append(a.Failed, state.Failure{
			ID: string(res.ID), Kind: res.Kind, Path: res.Path, Action: string(res.Action),
			Error: msg, BlockedBy: string(res.BlockedBy),
		})
	}
	return a
}
