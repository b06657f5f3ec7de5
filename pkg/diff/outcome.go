package diff

import (
	"errors"
	"fmt"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// Verdict is how converging one resource ended. It is a closed set: the
// agent maps each to a queue verb and metrics, a sync to a line of its
// report.
type Verdict string

// The verdicts.
const (
	// InSync: nothing was due. A resource found as desired whose record was
	// missing or stale is recorded, and still InSync.
	InSync Verdict = "inSync"
	// Applied: the change was carried out and recorded.
	Applied Verdict = "applied"
	// Waiting: held until Until (a dependency getting ready, a fight's
	// hold-off) or, with a zero Until, until another resource converges.
	Waiting Verdict = "waiting"
	// Failed: the observation or the apply failed; worth trying again.
	Failed Verdict = "failed"
	// Blocked: a dependency failed, or is not ready after the wait
	// timeout; tried again when it changes.
	Blocked Verdict = "blocked"
	// Refused: a policy refuses the change (suspended, selfHeal off, a
	// prune held); it stays until the policy or the desired state changes.
	Refused Verdict = "refused"
)

// Why the engine's gate holds a change back. A waiting, blocked or refused
// Outcome's Err wraps one of them (errors.Is).
var (
	// ErrSuspended: the agent is suspended; it observes and reports only.
	ErrSuspended = errors.New("suspended: observed and reported, never changed")
	// ErrDisabled: the resource is annotated cortex-sync/reconcile:
	// disabled, or held by cortex-sync stop.
	ErrDisabled = errors.New("reconcile disabled")
	// ErrSelfHealOff: drift is reported and not corrected.
	ErrSelfHealOff = errors.New("drift not corrected: selfHeal is off")
	// ErrPruneOff: removed from Git, and kept without --prune.
	ErrPruneOff = errors.New("removed from Git; kept without --prune")
	// ErrEmptyPrune: a prune would delete every resource.
	ErrEmptyPrune = errors.New("refusing to prune: the desired set is empty")
	// ErrSourceChange: a prune would delete what another source declared.
	ErrSourceChange = errors.New("refusing to prune: the source differs from the one the snapshot records")
	// ErrReservedPrune: a prune would reach a path cortex-sync owns (an
	// inventory recorded before such paths were refused).
	ErrReservedPrune = errors.New("refusing to prune: the path holds cortex-sync's own state")
	// ErrDependencyFailed: a dependency's last apply failed, or it was
	// blocked itself.
	ErrDependencyFailed = errors.New("a dependency did not apply")
	// ErrDependencyPending: a dependency is not applied yet.
	ErrDependencyPending = errors.New("a dependency is not applied yet")
	// ErrDependencyNotReady: a dependency is not healthy (yet, or after
	// the wait timeout).
	ErrDependencyNotReady = errors.New("a dependency is not ready")
	// ErrDependentFirst: something that depends on a resource being pruned
	// (or lies inside it) goes first.
	ErrDependentFirst = errors.New("a dependent goes first")
)

// Gated is an error that says, in its own words, why the gate held a
// change back, and wraps reason (one of the Err values above) for
// errors.Is.
func Gated(reason error, format string, args ...any) error {
	return &gated{reason: reason, msg: fmt.Sprintf(format, args...)}
}

type gated struct {
	reason error
	msg    string
}

func (g *gated) Error() string { return g.msg }
func (g *gated) Unwrap() error { return g.reason }

// Outcome is what converging one resource did, with the facts the caller
// needs to count and report it.
//
//	Verdict  Err                               Until
//	inSync   nil                               -
//	applied  nil                               -
//	waiting  why (errors.Is a gate error)      when to look again; zero: when another converges
//	failed   the apply's or observation's error -
//	blocked  why (errors.Is a gate error)      -
//	refused  why (errors.Is a gate error)      -
type Outcome struct {
	Verdict Verdict
	// Change is the observation the verdict was reached on: the look that
	// acted, never an earlier one.
	Change *Change
	Err    error
	Until  time.Time
	// BlockedBy names the dependency (or, for a prune, the dependent) in
	// the way of a waiting or blocked change.
	BlockedBy resource.ID
	// Duration is how long the apply took; zero when nothing was applied.
	Duration time.Duration
}

// Drift reports whether the outcome is about a correction of the host
// rather than a change in Git.
func (o Outcome) Drift() bool { return o.Change != nil && o.Change.IsDrift() }

// MadePaths reports whether the apply may have made paths on the host that
// were not there (a creation, a type replaced): what watches follow. A
// directory made inside a watched tree is seen by its watch.
func (o Outcome) MadePaths() bool {
	c := o.Change
	return o.Verdict == Applied && c != nil && c.Desired != nil &&
		(c.Action == Create || c.Observed.WrongType != "" || !c.Observed.Exists)
}
