package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// The hosts drive a rollout themselves: there is no controller. A host
// that fetched a new revision and would change something asks Admit for a
// slot; Admit reads the rollout's keys, decides, and takes the slot in one
// transaction that fails if any of what it read changed meanwhile (the
// rollout's keys, the slots, this host's hold), so two hosts can never
// both take the last slot. A slot lives on the host's presence lease: a
// host that goes offline frees it when its lease expires, and one that
// holds it past progressDeadline is stalled and no longer counted. A host
// reports Good (its slot is freed) or Bad (the failure is kept and counts
// against the budget and the failure threshold).

// Revision is a revision a host would apply, with the rollout: of that
// revision's Fleet manifest.
type Revision struct {
	ID      string // "main@sha1:…"
	Rollout resource.Rollout
}

// Decision is Admit's answer.
type Decision struct {
	Go         bool          // the host holds a slot: apply
	Why        string        // why not, for the host's status and log
	Wait       Wait          // why not, as a closed set
	RetryAfter time.Duration // ask again then, or when Changed closes
}

// Wait is why a host may not take a slot now.
type Wait string

// Why a host waits.
const (
	WaitHeld        Wait = "held"        // cortex-sync hold
	WaitMaintenance Wait = "maintenance" // the local maintenance file
	WaitStopped     Wait = "stopped"     // the rollout is paused or aborted
	WaitCanary      Wait = "canary"      // the canary hosts are not good yet
	WaitSlot        Wait = "slot"        // every slot is taken
	WaitBusy        Wait = "busy"        // the rollout's keys kept changing under the request
)

// stallGrace is added to progressDeadline before a slot's holder is
// stalled: the slot's time is the holder's clock, the check the asker's.
const stallGrace = time.Minute

// retryAfter is when a host that may not go asks again, with jitter so a
// fleet does not ask in step; a change wakes it sooner (Changed).
func retryAfter() time.Duration { return 2*time.Second + rand.N(time.Second) }

// The records of a rollout, as written to etcd. Each carries the Schema
// it was written in, and is read through decode (record.go).

type slotDoc struct {
	Schema   int       `json:"schema,omitempty"`
	Revision string    `json:"revision"`
	At       time.Time `json:"at"`
}

type specDoc struct {
	Schema   int              `json:"schema,omitempty"`
	Revision string           `json:"revision"`
	Rollout  resource.Rollout `json:"rollout"`
	By       string           `json:"by"` // the host that started it
	At       time.Time        `json:"at"`
}

// Rollout control states.
const (
	StateActive  = "active"
	StatePaused  = "paused"
	StateAborted = "aborted"
	// The states a rollout is read in besides: its canary hosts not all
	// good yet, going on, or done.
	StateCanary      = "canary"
	StateProgressing = "progressing"
	StateComplete    = "complete"
	// StateUnknown: the rollout's recorded spec does not pass (record.go),
	// so its state cannot be read from etcd; each host goes by its own.
	StateUnknown = "unknown"
)

type controlDoc struct {
	Schema int       `json:"schema,omitempty"`
	State  string    `json:"state"`
	By     string    `json:"by,omitempty"`
	Why    string    `json:"why,omitempty"`
	At     time.Time `json:"at"`
}

type verdictDoc struct {
	Schema int       `json:"schema,omitempty"`
	At     time.Time `json:"at"`
	Why    string    `json:"why,omitempty"`
}

type holdDoc struct {
	Schema int       `json:"schema,omitempty"`
	By     string    `json:"by,omitempty"`
	Why    string    `json:"why,omitempty"`
	At     time.Time `json:"at"`
}

// rolloutView is what one read saw of a revision's rollout.
type rolloutView struct {
	rev        int64 // the read's revision
	spec       *specDoc
	specKV     *kvPair // where spec was read
	control    *controlDoc
	controlRev int64 // mod revision of the control key: earlier failures are forgiven by a resume
	good       map[string]verdictDoc
	bad        map[string]verdictDoc
	badRev     map[string]int64
	transit    map[string]slotDoc
	live       int
	held       map[string]holdDoc
	// specIgnored says why the spec key, there, was ignored; specNewer
	// that it was written by a newer cortex-sync (it is then kept).
	specIgnored string
	specNewer   bool
	folded      bool      // the rollout is over and folded (gc.go): no host takes it
	ignored     []Ignored // every record ignored, in key order
}

// parseRollout reads the records of rev's rollout among kvs. A spec or
// control record that does not pass decode is ignored (the host's own
// rollout: stands in for the spec); a verdict is its key, so one whose
// record does not pass still counts, without its detail.
func (c *Client) parseRollout(v *rolloutView, rev string, kvs []*kvPair) {
	base := c.key("rollout", revKey(rev)) + "/"
	for _, kv := range kvs {
		rest, ok := strings.CutPrefix(kv.key, base)
		if !ok {
			continue
		}
		switch kind, host, _ := strings.Cut(rest, "/"); kind {
		case "spec":
			s, err := decode[specDoc](kv.value)
			if err == nil && s.Revision != rev {
				err = fmt.Errorf("names revision %q, not its key's", clip(s.Revision, 100))
			}
			if err != nil {
				err = fmt.Errorf("%w; each host goes by the rollout: of its own fleet.yaml", err)
				v.specIgnored, v.specNewer = err.Error(), errors.Is(err, ErrNewerSchema)
				v.ignored = append(v.ignored, c.ignore(kv, err))
				continue
			}
			v.spec, v.specKV = &s, kv
		case "control":
			s, err := decode[controlDoc](kv.value)
			if err != nil {
				v.ignored = append(v.ignored, c.ignore(kv, err))
				continue
			}
			v.control, v.controlRev = &s, kv.modRev
		case "good", "bad":
			if err := checkHost(host); err != nil {
				v.ignored = append(v.ignored, c.ignore(kv, err))
				continue
			}
			d, err := decode[verdictDoc](kv.value)
			if err != nil {
				v.ignored = append(v.ignored, c.ignore(kv, fmt.Errorf("%w; the verdict counts, without its detail", err)))
				d = verdictDoc{}
			}
			if kind == "good" {
				v.good[host] = d
			} else {
				v.bad[host], v.badRev[host] = d, kv.createRev
			}
		}
	}
}

type kvPair struct {
	key               string
	value             []byte
	createRev, modRev int64
	lease             int64
}

func pairs(rr ...*clientv3.GetResponse) []*kvPair {
	var out []*kvPair
	for _, r := range rr {
		for _, kv := range r.Kvs {
			out = append(out, &kvPair{key: string(kv.Key), value: kv.Value, createRev: kv.CreateRevision, modRev: kv.ModRevision, lease: kv.Lease})
		}
	}
	return out
}

func newView() *rolloutView {
	return &rolloutView{good: map[string]verdictDoc{}, bad: map[string]verdictDoc{}, badRev: map[string]int64{},
		transit: map[string]slotDoc{}, held: map[string]holdDoc{}}
}

// parseSlots reads the slots and holds among kvs. A slot is a host in
// transit while its key lives, so one whose record does not pass still
// counts (on no revision, never stalled) as long as it is on a lease; a
// hold is its key, and holds without its detail.
func (c *Client) parseSlots(v *rolloutView, kvs []*kvPair) {
	for _, kv := range kvs {
		if host, ok := strings.CutPrefix(kv.key, c.key("transit")+"/"); ok {
			if err := checkHost(host); err != nil {
				v.ignored = append(v.ignored, c.ignore(kv, err))
				continue
			}
			if kv.lease == 0 {
				v.ignored = append(v.ignored, c.ignore(kv, errors.New("is on no lease: a slot lives on its holder's presence lease")))
				continue
			}
			s, err := decode[slotDoc](kv.value)
			if err != nil {
				v.ignored = append(v.ignored, c.ignore(kv, fmt.Errorf("%w; the slot counts, on no known revision, until its lease ends", err)))
				s = slotDoc{}
			}
			v.transit[host] = s
		}
		if host, ok := strings.CutPrefix(kv.key, c.key("hold")+"/"); ok {
			if err := checkHost(host); err != nil {
				v.ignored = append(v.ignored, c.ignore(kv, err))
				continue
			}
			h, err := decode[holdDoc](kv.value)
			if err != nil {
				v.ignored = append(v.ignored, c.ignore(kv, fmt.Errorf("%w; the host is held, without the detail", err)))
				h = holdDoc{}
			}
			v.held[host] = h
		}
	}
}

// failures are the hosts bad on the revision that count: all of them, or
// those since the last resume.
func (v *rolloutView) failures() []string {
	var out []string
	for h := range v.bad {
		if v.control == nil || v.control.State != StateActive || v.badRev[h] > v.controlRev {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// stalled reports whether a slot's holder is past its deadline.
// A slot whose record could not be read is never stalled: it ends with
// its lease.
func stalled(s slotDoc, ro resource.Rollout, now time.Time) bool {
	return !s.At.IsZero() && now.Sub(s.At) > ro.ProgressDeadline.Std()+ro.MinReady.Std()+stallGrace
}

// state is the rollout's state and why: aborted, paused (by hand or by
// failures), canary or progressing.
func (v *rolloutView) state(ro resource.Rollout) (string, string) {
	if c := v.control; c != nil && c.State == StateAborted {
		return StateAborted, fmt.Sprintf("aborted by %s at %s%s; a newer revision starts a new rollout", orSomeone(c.By), c.At.Format(time.RFC3339), because(c.Why))
	}
	if c := v.control; c != nil && c.State == StatePaused {
		return StatePaused, fmt.Sprintf("paused by %s at %s%s; cortex-sync fleet rollout resume goes on", orSomeone(c.By), c.At.Format(time.RFC3339), because(c.Why))
	}
	failed := v.failures()
	if len(v.good) < ro.Canary && len(failed) > 0 {
		return StatePaused, fmt.Sprintf("paused: canary %s bad; fix and commit a new revision, or cortex-sync fleet rollout resume", v.failedText(failed))
	}
	if len(failed) >= ro.FailureThreshold {
		return StatePaused, fmt.Sprintf("paused: %d bad hosts reached the failure threshold (%d): %s; fix and commit a new revision, or cortex-sync fleet rollout resume",
			len(failed), ro.FailureThreshold, v.failedText(failed))
	}
	if len(v.good) < ro.Canary {
		return StateCanary, fmt.Sprintf("canary: %d of %d canary hosts good", len(v.good), ro.Canary)
	}
	return StateProgressing, ""
}

func (v *rolloutView) failedText(hosts []string) string {
	parts := make([]string, len(hosts))
	for i, h := range hosts {
		parts[i] = h + because(v.bad[h].Why)
	}
	return strings.Join(parts, ", ")
}

func because(why string) string {
	if why == "" {
		return ""
	}
	return " (" + why + ")"
}

func orSomeone(by string) string {
	if by == "" {
		return "an operator"
	}
	return by
}

// decide is Admit's rule on what it read, for host me.
func (v *rolloutView) decide(me string, r Revision, now time.Time) Decision {
	no := func(w Wait, format string, args ...any) Decision {
		return Decision{Why: fmt.Sprintf(format, args...), Wait: w, RetryAfter: retryAfter()}
	}
	if h, ok := v.held[me]; ok {
		return no(WaitHeld, "held by %s at %s%s: the rollout passes this host by until cortex-sync release", orSomeone(h.By), h.At.Format(time.RFC3339), because(h.Why))
	}
	if v.folded {
		return no(WaitStopped, "rollout of %s is over and folded (%d newer rollouts started since): this host stays on its revision until it fetches a newer one", r.ID, KeepRollouts)
	}
	// The host's own: every host reads R's fleet.yaml from Git; a
	// recorded spec is what observers (fleet status, resume) read, and
	// one that differs is forged or stale, and ignored (Admit).
	ro := r.Rollout
	if s, ok := v.transit[me]; ok && s.Revision == r.ID {
		return Decision{Go: true}
	}
	if st, why := v.state(ro); st == StateAborted || st == StatePaused {
		return no(WaitStopped, "rollout of %s %s", r.ID, why)
	}
	var applying []string // hosts in transition, on any revision
	var mine []string     // … on this one
	for h, s := range v.transit {
		if h == me || stalled(s, ro, now) {
			continue
		}
		applying = append(applying, h)
		if s.Revision == r.ID {
			mine = append(mine, h)
		}
	}
	slices.Sort(applying)
	failed := slices.DeleteFunc(v.failures(), func(h string) bool { return h == me })
	if len(v.good) < ro.Canary {
		if n := len(mine) + len(v.good) + len(failed); n >= ro.Canary {
			return no(WaitCanary, "waiting for the canary hosts (%s) to be good", strings.Join(mine, ", "))
		}
	}
	budget := ro.MaxUnavailable.Of(v.live)
	if taken := len(applying) + len(failed); taken >= budget {
		return no(WaitSlot, "waiting for a slot: %d of %d taken (applying: %s; bad: %s)", taken, budget, listOr(applying), listOr(failed))
	}
	return Decision{Go: true}
}

func listOr(hosts []string) string {
	if len(hosts) == 0 {
		return "none"
	}
	if len(hosts) > 5 {
		return strings.Join(hosts[:5], ", ") + fmt.Sprintf(" and %d more", len(hosts)-5)
	}
	return strings.Join(hosts, ", ")
}

// ErrNotPresent is returned by a rollout step while the host holds no
// presence lease: its slot could not outlive it, so it takes none.
var ErrNotPresent = errors.New("not present in the fleet (no presence lease yet)")

// Admit asks for a slot to apply r. Go is true only when this host holds
// a slot: an error (etcd unreachable) or a no means the host stays on its
// revision and goes on healing it. Asking again while holding the slot is
// a go; asking for another revision moves the slot to it.
func (m *Member) Admit(ctx context.Context, r Revision) (Decision, error) {
	ro, err := r.Rollout.Settle()
	if err != nil {
		return Decision{}, fmt.Errorf("rollout of %s: %w", r.ID, err)
	}
	r.Rollout = ro
	if m.maintenance != "" {
		on, why, err := Maintenance(m.maintenance)
		if err != nil {
			return Decision{}, err
		}
		if on {
			return Decision{Why: "in maintenance (" + m.maintenance + why + "): the rollout passes this host by until the file is removed", Wait: WaitMaintenance, RetryAfter: retryAfter()}, nil
		}
	}
	// While it asks, a new head alone is not written either: the answer
	// carries it (in the slot's transaction), or the host waits.
	m.mu.Lock()
	m.waiting = m.holding != r.ID
	m.mu.Unlock()
	for try := 0; ; try++ {
		var d Decision
		var won bool
		err := m.call(ctx, func(ctx context.Context) error {
			v, err := m.readRollout(ctx, r.ID, true)
			if err != nil {
				return err
			}
			if v.spec != nil && !reflect.DeepEqual(v.spec.Rollout, r.Rollout) {
				v.ignored = append(v.ignored, m.ignore(v.specKV, fmt.Errorf("differs from the rollout: of %s's own fleet.yaml as this host reads it; this host goes by its own", clip(r.ID, 100))))
			}
			m.mu.Lock()
			m.ignored = v.ignored
			m.mu.Unlock()
			d = v.decide(m.host.Name, r, time.Now())
			if !d.Go {
				return nil
			}
			if s, ok := v.transit[m.host.Name]; ok && s.Revision == r.ID {
				won = true
				return nil
			}
			m.mu.Lock()
			lease := m.lease
			m.mu.Unlock()
			if lease == 0 {
				return ErrNotPresent
			}
			won, err = m.takeSlot(ctx, v, r, lease)
			return err
		})
		if err != nil {
			return Decision{}, err
		}
		m.mu.Lock()
		m.waiting = !d.Go || !won // until it holds a slot
		m.mu.Unlock()
		if !d.Go {
			return d, nil
		}
		if won {
			m.mu.Lock()
			m.holding = r.ID
			m.quietUntil = time.Now().Add(r.Rollout.MinReady.Std() + 5*time.Second)
			m.mu.Unlock()
			return d, nil
		}
		if try == 5 {
			return Decision{Why: "the rollout's keys kept changing under this host's request", Wait: WaitBusy, RetryAfter: 100 * time.Millisecond}, nil
		}
	}
}

// readRollout reads a revision's rollout keys, the slots, the live host
// count and holds (only this host's when mine) at one revision.
func (c *Client) readRollout(ctx context.Context, rev string, mineOnly bool) (*rolloutView, error) {
	ops := []clientv3.Op{
		clientv3.OpGet(c.key("rollout", revKey(rev))+"/", clientv3.WithPrefix()),
		clientv3.OpGet(c.key("transit")+"/", clientv3.WithPrefix()),
		clientv3.OpGet(c.key("presence")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(c.key("hold")+"/", clientv3.WithPrefix()),
		clientv3.OpGet(c.summaryKey(rev), clientv3.WithCountOnly()), // folded (gc.go)
	}
	resp, err := c.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	v := newView()
	v.rev = resp.Header.Revision
	get := func(i int) *clientv3.GetResponse {
		return (*clientv3.GetResponse)(resp.Responses[i].GetResponseRange())
	}
	c.parseRollout(v, rev, pairs(get(0)))
	c.parseSlots(v, pairs(get(1), get(3)))
	v.live = int(get(2).Count)
	v.folded = get(4).Count > 0
	return v, nil
}

// takeSlot writes this host's slot if nothing it decided on changed.
func (m *Member) takeSlot(ctx context.Context, v *rolloutView, r Revision, lease clientv3.LeaseID) (bool, error) {
	after := v.rev + 1
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(m.key("rollout", revKey(r.ID))+"/"), "<", after).WithPrefix(),
		clientv3.Compare(clientv3.ModRevision(m.key("transit")+"/"), "<", after).WithPrefix(),
		clientv3.Compare(clientv3.ModRevision(m.key("hold", m.host.Name)), "<", after),
		clientv3.Compare(clientv3.CreateRevision(m.summaryKey(r.ID)), "=", 0), // not folded meanwhile
	}
	now := time.Now().UTC()
	slot, _ := json.Marshal(slotDoc{Schema: Schema, Revision: r.ID, At: now})
	ops := []clientv3.Op{clientv3.OpPut(m.key("transit", m.host.Name), string(slot), clientv3.WithLease(lease))}
	if v.spec == nil && !v.specNewer { // none yet, or one that does not pass: this host's
		spec, _ := json.Marshal(specDoc{Schema: Schema, Revision: r.ID, Rollout: r.Rollout, By: m.host.Name, At: now})
		ops = append(ops, clientv3.OpPut(m.key("rollout", revKey(r.ID), "spec"), string(spec)))
	}
	sops, s := m.statusOps(phase(r.ID, PhaseApplying))
	resp, err := m.cli.Txn(ctx).If(cmps...).Then(append(ops, sops...)...).Commit()
	if err != nil {
		return false, err
	}
	if resp.Succeeded {
		m.wrote(s)
		if v.spec == nil && !v.specNewer {
			m.foldSoon() // this host started a rollout: it folds what is over (gc.go)
		}
	}
	return resp.Succeeded, nil
}

// Good reports r good on this host (it passed the health gate): the slot
// is freed and the host counts towards the canary.
func (m *Member) Good(ctx context.Context, rev string) error {
	return m.verdict(ctx, rev, PhaseGood, "")
}

// Bad reports r bad on this host (it rolled back): the failure keeps its
// slot's place in the budget and counts towards the failure threshold.
func (m *Member) Bad(ctx context.Context, rev, why string) error {
	return m.verdict(ctx, rev, PhaseBad, why)
}

func (m *Member) verdict(ctx context.Context, rev, verdict, why string) error {
	now := time.Now().UTC()
	doc, _ := json.Marshal(verdictDoc{Schema: Schema, At: now, Why: clip(why, maxTextBytes)})
	base := m.key("rollout", revKey(rev))
	var ops []clientv3.Op
	switch verdict {
	case PhaseGood:
		ops = append(ops, clientv3.OpPut(base+"/good/"+m.host.Name, string(doc)), clientv3.OpDelete(base+"/bad/"+m.host.Name))
	default:
		ops = append(ops, clientv3.OpPut(base+"/bad/"+m.host.Name, string(doc)), clientv3.OpDelete(base+"/good/"+m.host.Name))
	}
	m.mu.Lock()
	holding := m.holding
	m.mu.Unlock()
	if holding == rev {
		ops = append(ops, clientv3.OpDelete(m.key("transit", m.host.Name)))
	}
	sops, s := m.statusOps(phase(rev, verdict))
	err := m.call(ctx, func(ctx context.Context) error {
		_, err := m.cli.Txn(ctx).Then(append(ops, sops...)...).Commit()
		return err
	})
	if err != nil {
		return fmt.Errorf("report %s %s: %w", rev, verdict, err)
	}
	m.wrote(s)
	m.mu.Lock()
	if m.holding == rev {
		m.holding = ""
	}
	m.quietUntil = time.Time{} // only now: the verdict carried the status
	m.mu.Unlock()
	return nil
}

// Release gives the slot back without a verdict: the host stopped
// applying (suspended, or its revision was superseded by a newer one it
// may not apply yet).
func (m *Member) Release(ctx context.Context) error {
	m.mu.Lock()
	holding := m.holding
	m.mu.Unlock()
	if holding == "" {
		return nil
	}
	err := m.call(ctx, func(ctx context.Context) error {
		_, err := m.cli.Delete(ctx, m.key("transit", m.host.Name))
		return err
	})
	if err == nil {
		m.mu.Lock()
		m.holding, m.quietUntil = "", time.Time{}
		m.mu.Unlock()
		m.mu.Lock()
		m.want.RolloutPhase = ""
		m.mu.Unlock()
		m.wake()
	}
	return err
}
