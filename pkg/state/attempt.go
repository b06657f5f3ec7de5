package state

import (
	"slices"
	"time"
)

// Attempt is the last sync that ran, whether or not all of it applied. It
// is kept apart from the applied revision, so a failed sync never reads as
// converged, and a resource that failed before it was ever applied (and so
// has no inventory entry) is still reported.
type Attempt struct {
	Revision string    `json:"revision,omitempty"`
	Time     time.Time `json:"time"`
	// Failed lists what did not apply: failed, or blocked by a failure.
	Failed []Failure `json:"failed,omitempty"`
	// Kept lists what left Git and stays on the host because prune was
	// not allowed: the host does not match Git until it goes.
	Kept []string `json:"kept,omitempty"`
}

// Failure is one resource that did not apply.
type Failure struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	Path      string `json:"path,omitempty"`
	Action    string `json:"action"`
	Error     string `json:"error"`
	BlockedBy string `json:"blockedBy,omitempty"`
}

// FailureOf finds the attempt's failure of a resource.
func (a *Attempt) FailureOf(id string) *Failure {
	if a == nil {
		return nil
	}
	for i := range a.Failed {
		if a.Failed[i].ID == id {
			return &a.Failed[i]
		}
	}
	return nil
}

// Keeps reports whether the attempt at revision rev kept id: removed from
// Git, and not pruned.
func (a *Attempt) Keeps(rev, id string) bool {
	return a != nil && a.Revision == rev && slices.Contains(a.Kept, id)
}
