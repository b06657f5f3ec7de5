package state

import (
	"slices"
	"time"
)

// What the snapshot remembers of the revisions this host applied: the last
// known good one, each one's verdict, and the revision the host is held on
// (after a rollback) with the head it is held from.

// Verdict is a revision's health verdict.
type Verdict string

// The verdicts of a revision.
const (
	// Pending: applied, and not judged yet.
	Pending Verdict = "pending"
	// Good: applied, and every resource with health stayed Healthy (and
	// every host check passed) for minReady within the progress deadline.
	Good Verdict = "good"
	// Bad: an apply failed, a resource got stuck, or the deadline passed
	// before the revision was good.
	Bad Verdict = "bad"
)

// Known is a revision known good, and since when.
type Known struct {
	Revision string    `json:"revision"`
	Time     time.Time `json:"time"`
}

// Pin holds the host on a revision other than its source's head: after a
// rollback, automatic or by hand. It is saved before the rollback changes
// anything, so an agent killed halfway finishes it when it starts again.
type Pin struct {
	// Revision is the revision the host is held on.
	Revision string `json:"revision"`
	// Head is the source's revision when the host was pinned: the pin ends
	// when a newer one arrives.
	Head string `json:"head"`
	// Manual: cortex-sync rollback put it there; cortex-sync resume ends
	// it. An automatic one ends only with a newer commit (or retry).
	Manual bool      `json:"manual,omitempty"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// Applied is one revision this host applied: a line of cortex-sync history.
type Applied struct {
	Revision string `json:"revision"`
	// Subject is the first line of the commit's message.
	Subject   string    `json:"subject,omitempty"`
	AppliedAt time.Time `json:"appliedAt"`
	// RollbackFrom names the revision this apply rolled back from: the
	// apply put a good revision back.
	RollbackFrom string `json:"rollbackFrom,omitempty"`
	// Manual: a rollback asked for by hand.
	Manual bool `json:"manual,omitempty"`
	// Verdict is empty for an apply that was not judged (a sync without
	// --wait, a rollback).
	Verdict  Verdict   `json:"verdict,omitempty"`
	JudgedAt time.Time `json:"judgedAt,omitzero"`
	// Reason says why a revision is bad, naming the failing resource or
	// host check.
	Reason string `json:"reason,omitempty"`
	// RolledBackTo is the revision the host went back to from this one.
	RolledBackTo string `json:"rolledBackTo,omitempty"`
	// Refused: not applied again until a newer commit arrives, or
	// cortex-sync retry.
	Refused bool `json:"refused,omitempty"`
}

// ToGood is how long the revision took from its apply to good.
func (a *Applied) ToGood() time.Duration {
	if a.Verdict != Good {
		return 0
	}
	return a.JudgedAt.Sub(a.AppliedAt)
}

// historyLen bounds the history kept in the snapshot.
const historyLen = 50

// Record adds an apply to the history, the oldest going past historyLen.
// The history is replaced, never changed in place: a view may read it.
func (s *Snapshot) Record(a Applied) {
	h := append(slices.Clone(s.History), a)
	if len(h) > historyLen {
		h = h[len(h)-historyLen:]
	}
	s.History = h
}

// Trial is the revision on trial: the newest line of history when it is
// pending (applied, not judged yet); nil when none is. Every surface
// (status, history, the agent's metrics, a fleet's row) reads it here.
func (s *Snapshot) Trial() *Applied {
	if n := len(s.History); n > 0 && s.History[n-1].Verdict == Pending {
		return &s.History[n-1]
	}
	return nil
}

// Latest is the newest apply of revision rev (not a rollback to it), nil
// when there is none.
func (s *Snapshot) Latest(rev string) *Applied {
	for i := len(s.History) - 1; i >= 0; i-- {
		if a := &s.History[i]; a.Revision == rev && a.RollbackFrom == "" {
			return a
		}
	}
	return nil
}

// Amend changes the newest apply of rev (not a rollback to it) with fn,
// replacing the history; it reports whether there was one.
func (s *Snapshot) Amend(rev string, fn func(*Applied)) bool {
	for i := len(s.History) - 1; i >= 0; i-- {
		if a := s.History[i]; a.Revision == rev && a.RollbackFrom == "" {
			h := slices.Clone(s.History)
			fn(&h[i])
			s.History = h
			return true
		}
	}
	return false
}

// Refused reports whether rev was refused: bad, rolled back from, and not
// to be applied again until a newer commit or a retry.
func (s *Snapshot) Refused(rev string) bool {
	a := s.Latest(rev)
	return a != nil && a.Refused
}

// AppliedBefore reports whether this host applied rev (in full, as the
// revision it was on, or as a rollback): a revision rollback --to may
// name.
func (s *Snapshot) AppliedBefore(rev string) bool {
	if rev == "" {
		return false
	}
	if s.Revision == rev || s.LastGood != nil && s.LastGood.Revision == rev {
		return true
	}
	for _, a := range s.History {
		if a.Revision == rev {
			return true
		}
	}
	return false
}
