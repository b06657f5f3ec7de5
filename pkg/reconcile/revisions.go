package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// The revision gate: a new revision is let in (Admit), tried (Look: good
// once every resource with health stays Healthy, and every host check
// passes, for MinReady within ProgressDeadline), and judged; a bad one is
// rolled back to the last good revision, which the host is then held on
// (a Pin) until a newer commit. Healing the revision the host is on is
// never gated.

// OnFailure is what becomes of a bad revision.
type OnFailure string

// What becomes of a bad revision.
const (
	// OnFailureRollback applies the last good revision again and refuses
	// the bad one until a newer commit.
	OnFailureRollback OnFailure = "rollback"
	// OnFailureHalt keeps the bad revision in place, and reports it.
	OnFailureHalt OnFailure = "halt"
)

// Defaults of the revision gate.
const (
	DefaultMinReady         = 10 * time.Second
	DefaultProgressDeadline = 5 * time.Minute
)

// RevisionPolicy is the health gate on a new revision.
type RevisionPolicy struct {
	// MinReady is how long every resource with health must stay Healthy,
	// and every check pass, without a break; 0: healthy once is enough
	// (sync --wait's default; the agent's flag defaults to
	// DefaultMinReady).
	MinReady time.Duration
	// ProgressDeadline bounds the time from the apply to good; default
	// DefaultProgressDeadline.
	ProgressDeadline time.Duration
	// FailureLimit is how many quick failures in a row of a process the
	// revision changed (a crash loop) make it bad at once; 0: none do
	// until the process reaches its own startLimit and is Failed. A crash
	// loop short of it is judged at the progress deadline, like any
	// process not healthy by then.
	FailureLimit int
	// Checks must pass for a revision to be good, whatever it changed.
	Checks []HostCheck
	// OnFailure: rollback (the default, when a last good revision
	// exists) or halt.
	OnFailure OnFailure
}

func (p RevisionPolicy) withDefaults() RevisionPolicy {
	if p.ProgressDeadline <= 0 {
		p.ProgressDeadline = DefaultProgressDeadline
	}
	return p
}

// Why a new revision is not adopted (errors.Is).
var (
	// ErrRevisionRefused: the revision was bad and rolled back from; it is
	// not applied again until a newer commit, or cortex-sync retry.
	ErrRevisionRefused = errors.New("revision refused: it was bad and rolled back from")
	// ErrRevisionHeld: a rollback holds the host on an earlier revision
	// until a newer commit (or, for one by hand, cortex-sync resume).
	ErrRevisionHeld = errors.New("held on an earlier revision by a rollback")
	// ErrNoHistory: a source without revisions (a directory) cannot be
	// rolled back.
	ErrNoHistory = errors.New("the source keeps no history to roll back to")
	// ErrNotApplied: a rollback may only go to a revision this host
	// applied before.
	ErrNotApplied = errors.New("not a revision this host applied")
)

// RevisionGate is a policy from outside the engine on adopting a new
// revision (a fleet's rollout slot). It is never asked about the revision
// the host is on: healing it, and restarts to its spec, are never gated.
type RevisionGate interface {
	// Admit is asked before a new revision is applied: nil lets it in;
	// an error keeps the host, healing, on the revision it is on until
	// it is asked again (the next fetch).
	Admit(ctx context.Context, revision string) error
	// Judged hears the verdict of a revision that was let in: good, or
	// bad (with why).
	Judged(revision string, verdict state.Verdict, reason string)
}

// AddRevisionGate adds a gate on new revisions. Call it before the first
// Admit.
func (s *Session) AddRevisionGate(g RevisionGate) { s.gates = append(s.gates, g) }

// Admission is the gate's answer on a new revision.
type Admission struct {
	// Stay, when not nil, is why the revision is not adopted: the host
	// stays on the revision it is on, or on Pin.
	Stay error
	// Pin is the revision a rollback holds the host on; "" when none.
	Pin string
}

// admit decides whether the source's newest revision, rev, is applied: a
// rollback's pin and a refused revision keep it out, and so may the gates
// added (a revision the host is on already is never asked about). A
// newer commit than the pinned head is let in.
func (s *Session) admit(ctx context.Context, rev string) Admission {
	view := s.w.View()
	pin := view.Pin
	pinned := ""
	if pin != nil {
		pinned = pin.Revision
	}
	switch {
	case rev == "" || pin != nil && rev == pin.Revision:
		return Admission{} // no name to judge; or the revision held on
	case pin != nil && rev == pin.Head && view.Refused(rev):
		return Admission{Stay: fmt.Errorf("%w (%s); the host stays on %s until a newer commit, or cortex-sync retry", ErrRevisionRefused, view.Latest(rev).Reason, pin.Revision), Pin: pinned}
	case pin != nil && rev == pin.Head:
		how := "until a newer commit, or cortex-sync resume"
		if !pin.Manual {
			how = "until a newer commit, or cortex-sync retry"
		}
		why := ""
		if pin.Reason != "" {
			why = " (" + pin.Reason + ")"
		}
		return Admission{Stay: fmt.Errorf("%w: on %s %s%s", ErrRevisionHeld, pin.Revision, how, why), Pin: pinned}
	case view.Refused(rev):
		return Admission{Stay: fmt.Errorf("%w (%s); run cortex-sync retry to apply it anyway", ErrRevisionRefused, view.Latest(rev).Reason), Pin: pinned}
	case rev == view.Revision:
		return Admission{} // the host is on it: never gated
	}
	for _, g := range s.gates {
		if err := g.Admit(ctx, rev); err != nil {
			return Admission{Stay: err}
		}
	}
	return Admission{}
}

// Trial is a revision on trial: applied, and not judged yet.
type Trial struct {
	Revision string
	// Start is when its apply began: the deadline runs from it.
	Start time.Time
	// Keys are the resources the revision changes; nil: all of them. Their
	// health, and that of whatever the engine applied since Start (a
	// restart a change caused), is judged: a resource the revision left
	// alone cannot make it bad, and rolling back would not cure it.
	Keys []resource.ID
	// MinReady and ProgressDeadline, when set, are the revision's own
	// (a fleet's rollout:) instead of the policy's.
	MinReady, ProgressDeadline time.Duration
	// healthy is since when everything was healthy; zero when it is not.
	healthy time.Time
}

// Policy is p with the trial's own minReady and progress deadline, when
// it has them.
func (t *Trial) Policy(p RevisionPolicy) RevisionPolicy {
	if t.MinReady > 0 {
		p.MinReady = t.MinReady
	}
	if t.ProgressDeadline > 0 {
		p.ProgressDeadline = t.ProgressDeadline
	}
	return p.withDefaults()
}

// Cause says what made a revision bad. It is a metric label: a closed set.
type Cause string

// The causes of a bad revision.
const (
	CauseApply     Cause = "apply_failed" // a resource did not apply
	CauseUnhealthy Cause = "unhealthy"    // a resource got stuck, or was not healthy by the deadline
	CauseCheck     Cause = "host_check"   // a host check failed until the deadline
	CauseManual    Cause = "manual"       // cortex-sync rollback (a rollback's cause, not a verdict's)
)

// Judgement is what a look at a revision on trial found.
type Judgement struct {
	Verdict state.Verdict // Pending, Good or Bad
	// Failing names what keeps the revision from good: a resource
	// ("Process/web") or a host check ("check ssh"); Reason says why.
	Failing string
	Reason  string
	Cause   Cause // of a bad verdict
	// Next is when to look again while pending.
	Next time.Time
	// At is when the look was made: when a verdict was reached.
	At time.Time
}

// Why is what the judgement says against the revision, in words.
func (j Judgement) Why() string {
	if j.Failing == "" {
		return j.Reason
	}
	return j.Failing + " " + j.Reason
}

// lookEvery bounds the time between two looks at a revision on trial.
const lookEvery = time.Second

// Look judges the revision on trial t as the host is now: bad at once when
// one of its resources did not apply or is stuck (a crash loop, a process
// failed), good once everything with health was Healthy and every check
// passed for MinReady, bad when the deadline passes first. It reads the
// snapshot and the health of what reports it (no scan of files), and runs
// the host checks.
func (s *Session) Look(ctx context.Context, t *Trial, now time.Time) Judgement {
	j := s.look(ctx, t, now)
	j.At = now
	return j
}

func (s *Session) look(ctx context.Context, t *Trial, now time.Time) Judgement {
	p := t.Policy(s.Policy.Revisions)
	deadline := t.Start.Add(p.ProgressDeadline)
	view := s.w.View()
	d := s.current()
	bad := func(failing string, cause Cause, format string, args ...any) Judgement {
		return Judgement{Verdict: state.Bad, Failing: failing, Cause: cause, Reason: fmt.Sprintf(format, args...)}
	}
	if a := view.LastAttempt; a != nil && a.Revision == t.Revision && d != nil {
		for _, f := range a.Failed {
			if id := resource.ID(f.ID); d.Set.Get(id) != nil && s.judges(t, id) {
				return bad(f.ID, CauseApply, "did not apply: %s", f.Error)
			}
		}
	}
	failing, reason, cause := "", "", CauseUnhealthy
	switch {
	case d == nil || d.Revision() != t.Revision:
		failing, reason = "", "is not the revision the host converges to"
	case view.Revision != t.Revision && !s.caughtUp(t, d):
		failing, reason = s.unconverged(t, d), "has not converged yet"
	default:
		host := s.host(d)
		for _, r := range d.Set.Resources() {
			if !s.judges(t, r.ID()) {
				continue // left alone
			}
			rec := view.Find(string(r.ID()))
			if rec == nil {
				continue // declared absent
			}
			rep, ok := host.Ready(ctx, rec)
			if !ok || rep.Health == health.Suspended {
				continue
			}
			// Before health: a process up again after its quick failures
			// failed them all the same.
			if p.FailureLimit > 0 && rep.Failures >= p.FailureLimit {
				times := fmt.Sprintf("%d times in a row", rep.Failures)
				if rep.Failures == 1 {
					times = "once"
				}
				return bad(rec.ID, CauseUnhealthy, "failed quickly %s (failureLimit %d): %s", times, p.FailureLimit, rep.Reason)
			}
			if rep.Health == health.Healthy {
				continue
			}
			if rep.Stuck {
				return bad(rec.ID, CauseUnhealthy, "is %s: %s", rep.Health, rep.Reason)
			}
			if failing == "" {
				failing, reason = rec.ID, fmt.Sprintf("is %s: %s", rep.Health, rep.Reason)
			}
		}
		if failing == "" {
			for _, c := range p.Checks {
				if err := c.Check(ctx); err != nil {
					failing, reason, cause = "check "+c.Name, fmt.Sprintf("fails (%s): %v", c.Probe(), err), CauseCheck
					break
				}
			}
		}
	}
	if failing == "" && reason == "" {
		if t.healthy.IsZero() {
			t.healthy = now
		}
		good := t.healthy.Add(p.MinReady)
		if !now.Before(good) {
			return Judgement{Verdict: state.Good}
		}
		return Judgement{Verdict: state.Pending, Reason: "healthy; staying so for minReady", Next: earliest(good, now.Add(lookEvery))}
	}
	t.healthy = time.Time{}
	if !now.Before(deadline) {
		j := bad(failing, cause, "%s after the progress deadline (%s)", reason, p.ProgressDeadline)
		if failing == "" {
			j.Reason = "the revision " + j.Reason
		}
		return j
	}
	again := min(lookEvery, max(p.MinReady/5, 100*time.Millisecond))
	return Judgement{Verdict: state.Pending, Failing: failing, Reason: reason, Cause: cause, Next: earliest(deadline, now.Add(again))}
}

// judges reports whether t's verdict rests on id: the revision changed
// it, or the engine applied it since the revision's apply began.
func (s *Session) judges(t *Trial, id resource.ID) bool {
	if t.Keys == nil || slices.Contains(t.Keys, id) {
		return true
	}
	at, ok := s.appliedAt(id)
	return ok && !at.Before(t.Start)
}

// caughtUp reports whether every resource t is judged on converged in
// this engine for d: its verdict then waits for no other work (a drift
// scan a webhook asked for). A pass that settled in full says so too
// (snapshot.Revision), resources held by policy included.
func (s *Session) caughtUp(t *Trial, d *Desired) bool { return s.unconverged(t, d) == "" }

// unconverged names a resource of d that t is judged on and has not
// converged yet in this engine; "" when there is none.
func (s *Session) unconverged(t *Trial, d *Desired) string {
	for _, r := range d.Set.Resources() {
		if (t.Keys == nil || slices.Contains(t.Keys, r.ID())) && !s.done(r.ID(), d) {
			return string(r.ID())
		}
	}
	return ""
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Await looks at t until it is judged, or ctx ends (then the judgement is
// the last pending one). poke, when it delivers, looks again at once.
func (s *Session) Await(ctx context.Context, t *Trial, poke <-chan struct{}) Judgement {
	for {
		j := s.Look(ctx, t, time.Now())
		if j.Verdict != state.Pending {
			return j
		}
		timer := time.NewTimer(time.Until(j.Next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return j
		case <-poke:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// begin notes that d, the source's newest revision, is now what the host
// converges to, and returns its trial: a new line of history, pending, or
// the pending one of an apply a killed run began (judged on all it holds).
// keys are the resources it changes; wasOn says the host was on d before
// (an agent restarted, a sync of the revision it is on): judged before,
// it is not tried again (nil); nor is a revision without a name (a
// directory). A newer commit than a pin's head ends the pin.
func (s *Session) begin(d *Desired, keys []resource.ID, wasOn bool, now time.Time) *Trial {
	rev := d.Revision()
	var t *Trial
	s.w.Update(func(snap *state.Snapshot) {
		unpin(snap, rev)
		if rev == "" {
			return
		}
		switch a := snap.Latest(rev); {
		case a != nil && a.Verdict == state.Pending:
			t = &Trial{Revision: rev, Start: a.AppliedAt} // all of it: what changed before is not known
			return
		case a != nil && a.Verdict != "" && wasOn:
			return // judged, and the host is on it
		}
		if keys == nil {
			keys = []resource.ID{} // none: what the engine applies from now is judged
		}
		if tr := snap.Trial(); tr != nil && tr.Revision != rev {
			// A newer revision replaces one still on trial: that one's
			// line ends unjudged, so only one revision is ever on trial.
			snap.Amend(tr.Revision, func(a *state.Applied) {
				a.Verdict, a.JudgedAt, a.Reason = "", now.UTC().Truncate(time.Millisecond), "replaced by "+rev+" before it was judged"
			})
		}
		snap.Record(state.Applied{Revision: rev, Subject: d.Checkout.Subject, AppliedAt: now.UTC().Truncate(time.Millisecond), Verdict: state.Pending})
		t = &Trial{Revision: rev, Start: now, Keys: keys}
	})
	return t
}

// noteApplied records that d, the source's newest revision, was applied in full
// without being judged (a sync without --wait): its line of history,
// unless the newest line is it already.
func (s *Session) noteApplied(d *Desired, now time.Time) {
	rev := d.Revision()
	if h := s.w.View().History; rev == "" || len(h) > 0 && h[len(h)-1].Revision == rev {
		return
	}
	s.w.Update(func(snap *state.Snapshot) {
		snap.Record(state.Applied{Revision: rev, Subject: d.Checkout.Subject, AppliedAt: now.UTC().Truncate(time.Millisecond)})
	})
}

// endPin ends a pin once the source's head is no longer the one it holds
// the host from (a newer commit, or the head went back to the revision the
// host is held on); it reports whether it did.
func (s *Session) endPin(head string) bool {
	if pin := s.w.View().Pin; pin == nil || head == "" || head == pin.Head {
		return false
	}
	done := false
	s.w.Update(func(snap *state.Snapshot) { done = unpin(snap, head) })
	return done
}

func unpin(snap *state.Snapshot, head string) bool {
	if pin := snap.Pin; pin != nil && head != "" && head != pin.Head {
		snap.Pin = nil
		return true
	}
	return false
}

// judge records the verdict of t: a good revision becomes the last known
// good; a bad one keeps its reason. A revision judged before (sync --wait
// of the revision the host is on) gets a new line only when the verdict
// changed. The gates hear it. It is saved with the next save.
func (s *Session) judge(t *Trial, j Judgement, now time.Time) {
	at := now.UTC().Truncate(time.Millisecond)
	why := ""
	if j.Verdict == state.Bad {
		why = j.Why()
	}
	s.w.Update(func(snap *state.Snapshot) {
		switch a := snap.Latest(t.Revision); {
		case a != nil && a.Verdict == state.Pending:
			snap.Amend(t.Revision, func(a *state.Applied) { a.Verdict, a.JudgedAt, a.Reason = j.Verdict, at, why })
		case a != nil && a.Verdict != j.Verdict && j.Verdict != state.Pending:
			snap.Record(state.Applied{Revision: t.Revision, Subject: a.Subject, AppliedAt: t.Start.UTC().Truncate(time.Millisecond), Verdict: j.Verdict, JudgedAt: at, Reason: why})
		}
		if j.Verdict == state.Good && t.Revision != "" {
			snap.LastGood = &state.Known{Revision: t.Revision, Time: at}
		}
	})
	for _, g := range s.gates {
		g.Judged(t.Revision, j.Verdict, j.Why())
	}
}

// Rollback is a rollback to record before it changes anything.
type Rollback struct {
	To   string // the revision to go back to
	From string // the revision the host leaves (bad, or on trial)
	// Head is the source's newest revision: the host is held on To until
	// a newer one arrives.
	Head   string
	Manual bool
	Reason string
}

// recordRollback saves the intent of a rollback before the host is
// touched: the host is pinned to r.To while the source's head is r.Head,
// the revision left is marked rolled back (and, when automatic, refused),
// and the rollback gets its line of history. A run killed after this
// finishes the rollback when it starts again (Admit answers with the pin).
func (s *Session) recordRollback(ctx context.Context, r Rollback, now time.Time) error {
	at := now.UTC().Truncate(time.Millisecond)
	return s.commit(ctx, func(snap *state.Snapshot) {
		head := r.Head
		if old := snap.Pin; old != nil && head == "" {
			head = old.Head
		}
		if head == "" {
			head = r.From
		}
		snap.Pin = &state.Pin{Revision: r.To, Head: head, Manual: r.Manual, Reason: r.Reason, Since: at}
		if r.From != "" && r.From != r.To {
			snap.Amend(r.From, func(a *state.Applied) {
				a.RolledBackTo = r.To
				a.Refused = a.Refused || !r.Manual
				if a.Verdict == state.Pending {
					a.Verdict, a.JudgedAt, a.Reason = "", at, "rolled back by hand before it was judged"
				}
			})
		}
		if r.From == r.To {
			return // on it already: held there, no rollback to tell
		}
		subject := ""
		if a := snap.Latest(r.To); a != nil {
			subject = a.Subject
		}
		snap.Record(state.Applied{Revision: r.To, Subject: subject, AppliedAt: at, RollbackFrom: r.From, Manual: r.Manual, Reason: r.Reason})
	})
}

// release ends a pin, by hand: a manual one (resume), or any, with the
// refusal of its head (retry, all true). It reports what it released: the
// revision the pin held the source's head from, "" when nothing.
func (s *Session) release(ctx context.Context, all bool) (string, error) {
	released := ""
	err := s.commit(ctx, func(snap *state.Snapshot) {
		pin := snap.Pin
		switch {
		case pin != nil && (pin.Manual || all):
			released, snap.Pin = pin.Head, nil
		case pin == nil && all:
			// A refused revision without a pin: the newest refused.
			for i := len(snap.History) - 1; i >= 0; i-- {
				if snap.History[i].Refused {
					released = snap.History[i].Revision
					break
				}
			}
		}
		if all && released != "" {
			snap.Amend(released, func(a *state.Applied) { a.Refused = false })
		}
	})
	return released, err
}

// minAbbrev is the shortest commit prefix taken, as Git's own.
const minAbbrev = 4

// ResolveApplied names the revision a rollback --to means: the last known
// good one for "", else a revision this host applied that rev names in
// full, or by a unique prefix of its name or of its commit (minAbbrev hex
// digits at least).
func ResolveApplied(snap *state.Snapshot, rev string) (string, error) {
	if rev == "" {
		if snap.LastGood == nil {
			return "", fmt.Errorf("%w: no revision was judged good here yet; name one with --to (cortex-sync history lists them)", ErrNotApplied)
		}
		return snap.LastGood.Revision, nil
	}
	var known []string
	add := func(r string) {
		if r != "" && !slices.Contains(known, r) {
			known = append(known, r)
		}
	}
	if snap.LastGood != nil {
		add(snap.LastGood.Revision)
	}
	for _, a := range snap.History {
		add(a.Revision)
	}
	add(snap.Revision)
	var match []string
	for _, r := range known {
		_, sha, _ := strings.Cut(r, "@sha1:")
		if r == rev {
			return r, nil
		}
		if strings.HasPrefix(r, rev) || sha != "" && len(rev) >= minAbbrev && strings.HasPrefix(sha, rev) {
			match = append(match, r)
		}
	}
	switch {
	case len(match) == 1:
		return match[0], nil
	case len(match) == 0 && len(rev) < minAbbrev:
		return "", fmt.Errorf("%w: %s (give at least %d hex digits of a commit; cortex-sync history lists those it did)", ErrNotApplied, rev, minAbbrev)
	case len(match) == 0:
		return "", fmt.Errorf("%w: %s (cortex-sync history lists those it did)", ErrNotApplied, rev)
	}
	return "", fmt.Errorf("%q names %d revisions applied here (%s): give more of it", rev, len(match), strings.Join(match, ", "))
}

// commit changes the snapshot and saves it now, under the state lock.
func (s *Session) commit(ctx context.Context, fn func(*state.Snapshot)) error {
	if err := s.w.Acquire(ctx); err != nil {
		return err
	}
	defer s.w.Release()
	s.w.Update(fn)
	return s.w.Save()
}

// pinner is a source that can open an earlier revision of itself (Git).
type pinner interface {
	At(ctx context.Context, revision string) (*source.Checkout, error)
}

// LoadAt fetches an earlier revision of src and validates it, as Load does
// the newest.
func LoadAt(ctx context.Context, src source.Source, revision string, opts resource.Options, log *slog.Logger) (*Desired, error) {
	p, ok := src.(pinner)
	if !ok || revision == "" {
		return nil, ErrNoHistory
	}
	co, err := p.At(ctx, revision)
	if err != nil {
		return nil, err
	}
	return validate(src, co, opts, log)
}

// CanRollBack reports whether src can open an earlier revision of itself.
func CanRollBack(src source.Source) bool {
	_, ok := src.(pinner)
	return ok
}

// HostCheck is an Agent-level check that must pass for a revision to be
// good even when nothing it changed reports health ("can I still reach
// the machine"): one probe, with a Process's probe syntax.
type HostCheck struct {
	Name    string            `yaml:"name" json:"name"`
	Exec    *health.ExecProbe `yaml:"exec" json:"exec,omitempty"`
	HTTP    *health.HTTPProbe `yaml:"http" json:"http,omitempty"`
	TCP     *health.TCPProbe  `yaml:"tcp" json:"tcp,omitempty"`
	Timeout resource.Duration `yaml:"timeout" json:"timeout,omitempty"` // default 1s
}

// ParseHostCheck reads a host check written as YAML (a flow mapping on a
// command line: {name: ssh, tcp: {address: "127.0.0.1:22"}}), strictly.
func ParseHostCheck(text string) (HostCheck, error) {
	var c HostCheck
	dec := yaml.NewDecoder(strings.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("a host check is {name: NAME, tcp: {address: HOST:PORT}} (or http: {url: URL}, or exec: {command: [ARGV]}): %v", err)
	}
	return c, c.Validate()
}

// Validate checks a host check's fields.
func (c HostCheck) Validate() error {
	var problems []string
	n := 0
	if c.Name == "" {
		problems = append(problems, "name is required")
	}
	if c.Exec != nil {
		n++
		if len(c.Exec.Command) == 0 {
			problems = append(problems, "exec.command is required")
		}
	}
	if c.HTTP != nil {
		n++
		if u, err := url.Parse(c.HTTP.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			problems = append(problems, fmt.Sprintf("http.url %q must be an http:// or https:// URL", c.HTTP.URL))
		}
	}
	if c.TCP != nil {
		n++
		if _, _, err := net.SplitHostPort(c.TCP.Address); err != nil {
			problems = append(problems, fmt.Sprintf("tcp.address %q must be host:port", c.TCP.Address))
		}
	}
	if n != 1 {
		problems = append(problems, "give exactly one of exec, http or tcp")
	}
	if len(problems) > 0 {
		return fmt.Errorf("host check %q: %s", c.Name, strings.Join(problems, "; "))
	}
	return nil
}

// Probe is the check's probe.
func (c HostCheck) Probe() *health.Probe {
	return &health.Probe{Exec: c.Exec, HTTP: c.HTTP, TCP: c.TCP, Timeout: c.Timeout}
}

// String is the check as a flag value reads it.
func (c HostCheck) String() string {
	b, _ := yaml.Marshal(c)
	var m yaml.Node
	if yaml.Unmarshal(b, &m) == nil && len(m.Content) == 1 {
		m.Content[0].Style = yaml.FlowStyle
		if out, err := yaml.Marshal(m.Content[0]); err == nil {
			return strings.TrimSpace(string(out))
		}
	}
	return c.Name
}

// Check runs the check once, within its timeout; an exec check runs as
// the agent does.
func (c HostCheck) Check(ctx context.Context) error {
	return c.Probe().Check(ctx, func(ctx context.Context, argv []string) ([]byte, error) {
		return exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	})
}
