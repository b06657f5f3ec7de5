package supervise

import "errors"

// ErrNoSpec reports a process with no spec on this host: never started
// here, or pruned.
var ErrNoSpec = errors.New("no supervised process by that name on this host")

// Identity names one process for good: a pid alone is reused, a pid with
// the kernel's start time (clock ticks since boot) is not.
type Identity struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}
