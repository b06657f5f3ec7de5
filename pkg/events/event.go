// Package events is what a host decides, told as it happens: one model
// for the local event log (cortex-sync events, /api/v1/events) and for
// notifications (webhooks, chat, commit status).
package events

import "time"

// Severity of an event.
type Severity string

// The severities, from the least.
const (
	Info    Severity = "info"
	Warning Severity = "warning"
	Error   Severity = "error"
)

// Reason is a stable code for what happened: filters and receivers match
// on it, so a reason once published is never renamed.
type Reason string

// The reasons.
const (
	RevisionFetched    Reason = "RevisionFetched"    // a new revision of the source was seen
	RevisionRefused    Reason = "RevisionRefused"    // refused: its signature or its manifests (Message says)
	RevisionApplied    Reason = "RevisionApplied"    // applied in full (on trial when the agent judges it; no Condition: a rollback went back to it)
	RevisionGood       Reason = "RevisionGood"       // judged good: the last known good revision now
	RevisionBad        Reason = "RevisionBad"        // judged bad
	RevisionRolledBack Reason = "RevisionRolledBack" // the host went back to another revision
	RevisionHeld       Reason = "RevisionHeld"       // not applied: a fleet rollout, a rollback or a gate holds it
	DriftCorrected     Reason = "DriftCorrected"     // a resource changed on the host was put back
	FightStarted       Reason = "FightStarted"       // something keeps undoing a resource
	FightEnded         Reason = "FightEnded"
	ProcessRestarted   Reason = "ProcessRestarted" // it exited and was started again
	ProcessKilled      Reason = "ProcessKilled"    // killed for failing its liveness probe
	ProcessFailed      Reason = "ProcessFailed"    // given up on: its startLimit, or exited for good
	ProcessRunning     Reason = "ProcessRunning"   // running again after it failed
	CoordinatorLost    Reason = "CoordinatorLost"  // etcd unreachable: the host keeps its revision
	CoordinatorBack    Reason = "CoordinatorBack"
	RolloutSlotTaken   Reason = "RolloutSlotTaken" // a fleet rollout let this host apply a revision
	RolloutPaused      Reason = "RolloutPaused"
	SourceFailing      Reason = "SourceFailing" // fetches fail: the host keeps its revision
	SourceRecovered    Reason = "SourceRecovered"
)

// Reasons are every reason, in the order above: what a filter may name.
var Reasons = []Reason{
	RevisionFetched, RevisionRefused, RevisionApplied, RevisionGood, RevisionBad, RevisionRolledBack,
	RevisionHeld, DriftCorrected, FightStarted, FightEnded, ProcessRestarted, ProcessKilled,
	ProcessFailed, ProcessRunning, CoordinatorLost, CoordinatorBack, RolloutSlotTaken, RolloutPaused,
	SourceFailing, SourceRecovered,
}

// Event is one thing a host decided or saw.
type Event struct {
	Time     time.Time `json:"time"`
	Host     string    `json:"host"`
	Severity Severity  `json:"severity"`
	Reason   Reason    `json:"reason"`
	Resource string    `json:"resource,omitempty"` // "File/motd"
	Revision string    `json:"revision,omitempty"` // "main@sha1:…"
	Message  string    `json:"message"`
	// Condition names what a warning or error raises and a later info
	// event on the same condition clears ("source", "revision",
	// "coordinator", "resource:File/motd", "fight:File/motd"): a notifier
	// tells "recovered" when a raised condition clears.
	Condition string `json:"condition,omitempty"`
}

// Sink takes events. Emit never blocks the caller for long (a full queue
// drops, counting what it dropped), and never fails it.
type Sink interface {
	Emit(Event)
}

// Discard is a Sink that keeps nothing.
var Discard Sink = discard{}

type discard struct{}

func (discard) Emit(Event) {}

// Tee emits every event to each sink in turn.
type Tee []Sink

// Emit emits e to each sink.
func (t Tee) Emit(e Event) {
	for _, s := range t {
		s.Emit(e)
	}
}
