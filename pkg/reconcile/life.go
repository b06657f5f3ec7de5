package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// A revision's life on this host, sequenced here and nowhere else: admit
// or stay, adopt, trial, verdict, roll back or halt, load, record, follow.
// The agent's loop and its verbs, a fleet's slot (a RevisionGate) and the
// CLI (sync --wait, rollback, retry, resume) drive a Life and map the
// Outcome it returns; none of them orders the steps.
//
// The order, decided once: a revision to go to is loaded (fetched and
// validated) before anything is recorded, so a revision that cannot be
// loaded is refused with nothing changed; then what was decided is
// recorded and saved at once, before the host is touched (a pin, a
// verdict, a trial begun); then the session converges to it. A run killed
// between any two steps finds the record and finishes from it: a pin is
// followed (Offer), a pending trial is judged on all it holds.

// Phase is where a revision's life stands after a step: a closed set.
type Phase string

// The phases of a revision's life.
const (
	// PhaseAdopted: the host converges to the revision, not on trial (it has
	// no name, it was judged before, or it is the revision a rollback
	// goes to or holds the host on).
	PhaseAdopted Phase = "adopted"
	// PhaseHeld: the revision is not adopted; Why names what holds it and the
	// verb that ends the hold.
	PhaseHeld Phase = "held"
	// PhaseOnTrial: adopted and being judged since Since.
	PhaseOnTrial Phase = "on trial"
	// PhaseGood: judged good; it is the last known good revision now.
	PhaseGood Phase = "good"
	// PhaseRolledBack: judged bad (or rolled back from by hand); the host goes
	// back to To.
	PhaseRolledBack Phase = "rolled back"
	// PhaseHalted: judged bad, and the host stays on it: onFailure is halt, or
	// there is nothing to go back to (Why says which).
	PhaseHalted Phase = "halted"
)

// Outcome is what a step of a revision's life did. A caller maps it: queue
// what Desired changes, apply it, report, exit.
type Outcome struct {
	Phase    Phase
	Revision string // the revision the step was about
	// Since is when the trial began (on trial), or when it was judged.
	Since time.Time
	// To is the revision the host converges to instead of Revision: the
	// one rolled back to, or the one a rollback holds it on ("" when it is
	// held by a gate and stays on what it is on).
	To string
	// Why says what holds a revision (errors.Is ErrRevisionRefused,
	// ErrRevisionHeld, or a gate's error), why it was bad, or why a bad
	// one was not rolled back.
	Why error
	// Judgement is the look that judged it (good, rolled back, halted).
	Judgement *Judgement
	// Trial is the trial to look at (on trial).
	Trial *Trial
	// Desired is set when the step changed what the session converges to
	// (adopted, on trial, rolled back, held on a pin): the caller converges
	// to it. The revision it replaced is the caller's to close.
	Desired *Desired
}

// Errors of the verbs: each names what holds the host and what ends it.
var (
	// ErrNothingToRetry: no revision is refused and no rollback holds
	// the host.
	ErrNothingToRetry = errors.New("nothing to retry: no revision is refused, and no rollback holds the host")
	// ErrNothingToResume: no rollback by hand holds the host (and, for
	// the agent, it is not suspended).
	ErrNothingToResume = errors.New("nothing to resume")
	// ErrAutomaticRollback: an automatic rollback holds the host; resume
	// does not end it.
	ErrAutomaticRollback = errors.New("an automatic rollback holds the host")
	// ErrUnloadable: the revision the host is to go to (a pin's) could
	// not be loaded; the caller tries again.
	ErrUnloadable = errors.New("cannot be loaded")
)

// Life drives a session's revisions. Load opens an earlier revision of the
// source (a rollback's target, a pinned one); nil when the source keeps no
// history (a directory).
type Life struct {
	s    *Session
	load func(ctx context.Context, revision string) (*Desired, error)
}

// Life is the owner of the session's revisions, loading earlier ones from
// src as opts validate them.
func (s *Session) Life(src source.Source, opts resource.Options) *Life {
	l := &Life{s: s}
	if CanRollBack(src) {
		l.load = func(ctx context.Context, rev string) (*Desired, error) {
			return LoadAt(ctx, src, rev, opts, s.log())
		}
	}
	return l
}

// Offer decides what becomes of d, the source's newest revision (validated):
// held, adopted, or put on trial (try: the agent, sync --wait; without, it
// is noted as applied once a sync applies it in full). A rollback's pin
// held from d is followed: the host goes to the pinned revision (loaded)
// when it is not on it yet, which finishes a rollback a killed run began.
// A held d stays the caller's; an adopted one is the session's.
func (l *Life) Offer(ctx context.Context, d *Desired, keys []resource.ID, try bool, now time.Time) Outcome {
	s, rev := l.s, d.Revision()
	adm := s.admit(ctx, rev)
	if adm.Stay != nil {
		o := Outcome{Phase: PhaseHeld, Revision: rev, To: adm.Pin, Why: adm.Stay}
		cur := s.Desired()
		target := adm.Pin
		if target == "" && cur == nil {
			target = s.View().Revision // heal what the host is on
		}
		if target != "" && (cur == nil || cur.Revision() != target) {
			pinned, err := l.loadAt(ctx, target)
			if err != nil {
				o.Why = fmt.Errorf("%w; and %s, the revision the host stays on, %w: %w", adm.Stay, target, ErrUnloadable, err)
				return o
			}
			s.SetDesired(pinned)
			o.Desired = pinned
		}
		return o
	}
	wasOn := s.View().Revision == rev
	s.endPin(rev) // a newer commit than the one a rollback held the host from
	if s.Desired() != d {
		s.SetDesired(d) // a command opened its session on d already
	}
	o := Outcome{Phase: PhaseAdopted, Revision: rev, Desired: d}
	if !try {
		return o
	}
	t := s.begin(d, keys, wasOn, now)
	if t == nil {
		return o
	}
	// Saved before anything is applied: status, history and metrics show
	// the revision on trial from the first moment, and a kill before the
	// verdict finds it pending.
	l.save(ctx, "save the revision on trial", rev)
	killPoint("trial-saved")
	o.Phase, o.Since, o.Trial = PhaseOnTrial, t.Start, t
	return o
}

// Heal makes the revision the host runs (the snapshot's) the session's
// desired state when it has none: the source's newest was refused (its
// signatures, its manifests) before any was adopted, at start, and the host
// goes on healing what it runs. The revision is loaded from the source's
// history (a Git source does not verify again the revision the host runs:
// it was when applied). nil, nil when there is nothing to load.
func (l *Life) Heal(ctx context.Context) (*Desired, error) {
	s := l.s
	rev := s.View().Revision
	if s.Desired() != nil || rev == "" {
		return nil, nil
	}
	d, err := l.loadAt(ctx, rev)
	if err != nil {
		return nil, err
	}
	s.SetDesired(d)
	return d, nil
}

// OnHead says head, the source's newest revision, is the one the host
// converges to already: a rollback's pin held from another head ends. It
// reports whether one did.
func (l *Life) OnHead(head string) bool { return l.s.endPin(head) }

// Applied notes that d, adopted without a trial, applied in full (a sync
// without --wait): its line of history.
func (l *Life) Applied(d *Desired, now time.Time) { l.s.noteApplied(d, now) }

// Verdict records how the trial t ended, as j says, and acts on it: a good
// revision is the last known good; a bad one is rolled back to the last
// good revision (loaded first; the verdict and the rollback are recorded
// together), or kept (onFailure: halt, no last good revision, no history,
// or the last good one cannot be loaded: Why says which). A pending j (the
// caller stopped looking) records nothing.
func (l *Life) Verdict(ctx context.Context, t *Trial, j Judgement) Outcome {
	s := l.s
	o := Outcome{Phase: PhaseOnTrial, Revision: t.Revision, Since: t.Start, Trial: t, Judgement: &j}
	if j.Verdict == state.Pending {
		return o
	}
	o.Since, o.Trial = j.At, nil
	prev := ""
	if g := s.View().LastGood; g != nil {
		prev = g.Revision
	}
	s.judge(t, j, j.At)
	if j.Verdict == state.Good {
		o.Phase = PhaseGood
		l.save(ctx, "save the verdict", t.Revision)
		return o
	}
	bad := errors.New(j.Why())
	o.Phase, o.Why = PhaseHalted, bad
	switch {
	case s.Policy.Revisions.OnFailure == OnFailureHalt:
		o.Why = fmt.Errorf("%w; halted on it (onFailure: halt)", bad)
	case prev == "" || prev == t.Revision:
		o.Why = fmt.Errorf("%w; no last good revision to roll back to, so the host stays on it", bad)
	case l.load == nil:
		o.Why = fmt.Errorf("%w; the source keeps no history to roll back to, so the host stays on it", bad)
	default:
		to, err := l.load(ctx, prev)
		if err != nil {
			o.Why = fmt.Errorf("%w; the last good revision %s cannot be loaded (%w), so the host stays on it: cortex-sync rollback tries again", bad, prev, err)
			break
		}
		killPoint("verdict-loaded")
		r := Rollback{To: prev, From: t.Revision, Head: t.Revision, Reason: j.Why()}
		if err := s.recordRollback(ctx, r, j.At); err != nil {
			to.Close()
			o.Why = fmt.Errorf("%w; the rollback to %s could not be recorded (%w), so the host stays on it", bad, prev, err)
			return o
		}
		killPoint("verdict-recorded")
		s.SetDesired(to)
		o.Phase, o.To, o.Desired = PhaseRolledBack, prev, to
		return o
	}
	l.save(ctx, "save the verdict", t.Revision)
	return o
}

// Rollback goes back by hand to an earlier revision this host applied (to:
// "" for the last good one, or a unique prefix), held there until a newer
// commit or Resume. head is the source's newest revision, when known. The
// revision is loaded before anything is recorded: one that cannot be
// fetched, or no longer validates, is refused with nothing changed.
func (l *Life) Rollback(ctx context.Context, to, head string, now time.Time) (Outcome, error) {
	s := l.s
	rev, err := ResolveApplied(s.View(), to)
	if err != nil {
		return Outcome{}, err
	}
	d, err := l.loadAt(ctx, rev)
	if err != nil {
		return Outcome{}, err
	}
	killPoint("rollback-loaded")
	from := s.View().Revision
	if cur := s.Desired(); cur != nil {
		from = cur.Revision()
	}
	if err := s.recordRollback(ctx, Rollback{To: rev, From: from, Head: head, Manual: true}, now); err != nil {
		d.Close()
		return Outcome{}, err
	}
	killPoint("rollback-recorded")
	o := Outcome{Phase: PhaseRolledBack, Revision: from, To: rev, Since: now}
	if cur := s.Desired(); cur != nil && cur.Revision() == rev {
		d.Close() // on it already: held there
		return o, nil
	}
	s.SetDesired(d)
	o.Desired = d
	return o, nil
}

// Retry ends what keeps a revision a rollback refused off the host: the
// refusal, and the pin, automatic or by hand. It returns that revision;
// the caller fetches and offers it again.
func (l *Life) Retry(ctx context.Context) (string, error) {
	rev, err := l.s.release(ctx, true)
	if err == nil && rev == "" {
		err = ErrNothingToRetry
	}
	return rev, err
}

// Resume ends a rollback by hand. It returns the revision the pin held the
// host from; "" and ErrNothingToResume when none holds it, or an error
// naming retry when the rollback that holds it is automatic (resume does
// not let a revision judged bad in).
func (l *Life) Resume(ctx context.Context) (string, error) {
	if pin := l.s.View().Pin; pin != nil && !pin.Manual {
		why := ""
		if pin.Reason != "" {
			why = ": " + pin.Reason
		}
		return "", fmt.Errorf("%w on %s (%s was bad%s) until a newer commit; cortex-sync retry applies %s anyway", ErrAutomaticRollback, pin.Revision, pin.Head, why, pin.Head)
	}
	rev, err := l.s.release(ctx, false)
	if err == nil && rev == "" {
		err = fmt.Errorf("%w: no rollback by hand holds the host", ErrNothingToResume)
	}
	return rev, err
}

// loadAt loads an earlier revision of the source.
func (l *Life) loadAt(ctx context.Context, rev string) (*Desired, error) {
	if l.load == nil {
		return nil, ErrNoHistory
	}
	d, err := l.load(ctx, rev)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", rev, err)
	}
	return d, nil
}

// save saves the snapshot now, under the state lock: what was decided is
// on disk before it is told or acted on. A failure is logged; the next
// save writes it.
func (l *Life) save(ctx context.Context, what, rev string) {
	if err := l.s.commit(ctx, func(*state.Snapshot) {}); err != nil {
		l.s.log().Error(what, "revision", rev, "error", err)
	}
}
