// Package health is the health model: what each resource reports, and how
// many reports fold into one (the worst wins).
package health

// Status is a resource's health.
type Status string

// The health statuses, from best to worst (Argo CD's order).
const (
	Healthy     Status = "Healthy"     // converged and, where it can tell, working
	Suspended   Status = "Suspended"   // reconcile disabled: observed, never changed
	Progressing Status = "Progressing" // on its way, e.g. a process not yet ready
	Missing     Status = "Missing"     // not on the host
	Degraded    Status = "Degraded"    // failed, crashed, or its probe fails
	Unknown     Status = "Unknown"     // could not be observed
)

var rank = map[Status]int{Healthy: 0, Suspended: 1, Progressing: 2, Missing: 3, Degraded: 4, Unknown: 5}

// Worst folds statuses into one; no statuses at all is Healthy.
func Worst(statuses ...Status) Status {
	w := Healthy
	for _, s := range statuses {
		if rank[s] > rank[w] {
			w = s
		}
	}
	return w
}

// Sync says whether the host matches what it should.
type Sync string

// The sync statuses.
const (
	Synced    Sync = "Synced"
	OutOfSync Sync = "OutOfSync"
)

// Report is one resource's observed sync status and health, with why.
type Report struct {
	Sync   Sync   `json:"sync"`
	Health Status `json:"health"`
	Reason string `json:"reason,omitempty"`
	// Stuck: Degraded, and waiting will not make it better (a process
	// failed at its startLimit, or exited for good). A revision's health
	// gate judges it bad at once rather than at its deadline.
	Stuck bool `json:"stuck,omitempty"`
	// Failures are a process's quick failures in a row since its spec
	// last changed, backing off or up again after them: the revision gate
	// weighs them against its failureLimit.
	Failures int `json:"failures,omitempty"`
}
