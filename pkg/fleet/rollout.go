package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// The hosts drive a rollout themselves: there is no controller. A host
// that fetched a new revision and would change something asks Admit for a
// slot (admit.go has how, at a cost per host that does not grow with the
// fleet). A slot lives on the host's slot lease: a host that goes offline
// frees it when its lease expires, and one that holds it past
// progressDeadline frees it itself (it is stalled). A host reports Good
// (its slot is freed) or Bad (the failure is kept and counts against the
// budget and the failure threshold).

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
// fleet does not ask in step: soon where nothing in etcd tells of the
// change (the maintenance file), later where a watch does (Changed):
// then it only covers a watch that missed.
func retryAfter() time.Duration { return 2*time.Second + rand.N(time.Second) }

func watchedRetry() time.Duration { return 10*time.Second + rand.N(5*time.Second) }

// The records of a rollout, as written to etcd. Each carries the Schema
// it was written in, and is read through decode (record.go).

// slotDoc is a slot (slot/N: its holder) or a place in the queue
// (queue/HOST), and a legacy slot (transit/HOST, before schema 3).
type slotDoc struct {
	Schema   int       `json:"schema,omitempty"`
	Host     string    `json:"host,omitempty"` // a slot's holder
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
	controlRev int64                 // mod revision of the control key: earlier failures are forgiven by a resume
	good       map[string]verdictDoc // the good hosts, when read (fleet status); admission reads goodN
	goodN      int                   // how many hosts are good on it, when counted (admission)
	bad        map[string]verdictDoc
	badRev     map[string]int64
	transit    map[string]slotDoc // slots by holder, when read with values (fleet status)
	slots      map[string]bool    // the slot keys taken (slot/N, and transit/HOST of older hosts)
	slotCreate map[string]int64   // … and their create revisions
	canary     map[string]bool    // the hosts applying it as a canary
	live       int
	held       map[string]holdDoc
	slotBase   string // the slots' key prefix
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
		transit: map[string]slotDoc{}, slots: map[string]bool{}, slotCreate: map[string]int64{}, canary: map[string]bool{}, held: map[string]holdDoc{}}
}

// parseSlots reads the slots and holds among kvs. A slot is taken while
// its key lives, so one whose record does not pass still counts (on no
// revision, never stalled) as long as it is on a lease; a hold is its
// key, and holds without its detail. transit/HOST is a slot of a host of
// a schema before 3: it counts as one.
func (c *Client) parseSlots(v *rolloutView, kvs []*kvPair) {
	for _, kv := range kvs {
		if n, ok := strings.CutPrefix(kv.key, c.key("slot")+"/"); ok {
			if err := checkSlot(n); err != nil {
				v.ignored = append(v.ignored, c.ignore(kv, err))
				continue
			}
			v.slots[kv.key] = true // taken while it lives, whoever wrote it
			if kv.lease == 0 {
				v.ignored = append(v.ignored, c.ignore(kv, errors.New("is on no lease (a slot lives on its holder's slot lease): it takes a slot until it is deleted")))
				continue
			}
			s, err := decode[slotDoc](kv.value)
			if err == nil {
				err = checkHost(s.Host)
			}
			if err != nil {
				v.ignored = append(v.ignored, c.ignore(kv, fmt.Errorf("%w; the slot counts, held by no known host, until its lease ends", err)))
				continue
			}
			v.transit[s.Host] = s
		}
		if host, ok := strings.CutPrefix(kv.key, c.key("transit")+"/"); ok {
			if err := checkHost(host); err != nil {
				v.ignored = append(v.ignored, c.ignore(kv, err))
				continue
			}
			v.slots[kv.key] = true
			if kv.lease == 0 {
				v.ignored = append(v.ignored, c.ignore(kv, errors.New("is on no lease (a slot lives on its holder's lease): it takes a slot until it is deleted")))
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

// checkSlot refuses a slot key's number that no host writes.
func checkSlot(n string) error {
	if i, err := strconv.Atoi(n); err != nil || i < 0 || strconv.Itoa(i) != n {
		return errors.New("is not a slot number")
	}
	return nil
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
	if v.goods() < ro.Canary && len(failed) > 0 {
		return StatePaused, fmt.Sprintf("paused: canary %s bad; fix and commit a new revision, or cortex-sync fleet rollout resume", v.failedText(failed))
	}
	if len(failed) >= ro.FailureThreshold {
		return StatePaused, fmt.Sprintf("paused: %d bad hosts reached the failure threshold (%d): %s; fix and commit a new revision, or cortex-sync fleet rollout resume",
			len(failed), ro.FailureThreshold, v.failedText(failed))
	}
	if v.goods() < ro.Canary {
		return StateCanary, fmt.Sprintf("canary: %d of %d canary hosts good", v.goods(), ro.Canary)
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

// decide is Admit's rule on what it read, for host me: whether it may
// take a slot for r now. Which slot, and whether hosts queued before it
// go first, is Admit's.
func (v *rolloutView) decide(me string, r Revision) Decision {
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
	if st, why := v.state(ro); st == StateAborted || st == StatePaused {
		return no(WaitStopped, "rollout of %s %s", r.ID, why)
	}
	failed := slices.DeleteFunc(v.failures(), func(h string) bool { return h == me })
	if v.goods() < ro.Canary {
		var canary []string // hosts applying r as a canary
		for h := range v.canary {
			if h != me {
				canary = append(canary, h)
			}
		}
		slices.Sort(canary)
		if len(canary)+v.goods()+len(failed) >= ro.Canary {
			return no(WaitCanary, "waiting for the canary hosts (%s) to be good", strings.Join(canary, ", "))
		}
	}
	if free := v.free(ro, len(failed)); len(free) == 0 {
		return no(WaitSlot, "waiting for a slot: %d of %d taken (%d applying; bad: %s)", len(v.slots)+len(failed), ro.MaxUnavailable.Of(v.live), len(v.slots), listOr(failed))
	}
	return Decision{Go: true}
}

// goods is how many hosts are good on the rollout: counted, or listed.
func (v *rolloutView) goods() int { return max(v.goodN, len(v.good)) }

func (v *rolloutView) slotKey(i int) string { return v.slotBase + strconv.Itoa(i) }

// free are the slots that may be taken, in order: of the budget
// (maxUnavailable of the live hosts) less the hosts bad on the revision,
// those no one holds, as many as the budget has left.
func (v *rolloutView) free(ro resource.Rollout, failed int) []string {
	budget := ro.MaxUnavailable.Of(v.live) - failed
	left := budget - len(v.slots)
	var out []string
	for i := 0; i < budget && len(out) < left; i++ {
		if k := v.slotKey(i); !v.slots[k] {
			out = append(out, k)
		}
	}
	return out
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

// readRollout reads all of a revision's rollout at one revision: its
// records (good hosts listed), the slots with their holders, the live
// host count and the holds. What an operator's command decides on
// (resume); a host's admission reads less (readAdmit).
func (c *Client) readRollout(ctx context.Context, rev string) (*rolloutView, error) {
	ops := []clientv3.Op{
		clientv3.OpGet(c.key("rollout", revKey(rev))+"/", clientv3.WithPrefix()),
		clientv3.OpGet(c.key("slot")+"/", clientv3.WithPrefix()),
		clientv3.OpGet(c.key("transit")+"/", clientv3.WithPrefix()),
		clientv3.OpGet(c.key("hold")+"/", clientv3.WithPrefix()),
		clientv3.OpGet(c.key("presence")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(c.summaryKey(rev), clientv3.WithCountOnly()), // folded (gc.go)
	}
	resp, err := c.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	get := func(i int) *clientv3.GetResponse {
		return (*clientv3.GetResponse)(resp.Responses[i].GetResponseRange())
	}
	v := newView()
	v.rev, v.slotBase = resp.Header.Revision, c.key("slot")+"/"
	c.parseRollout(v, rev, pairs(get(0)))
	c.parseSlots(v, pairs(get(1), get(2), get(3)))
	v.live = int(get(4).Count)
	v.folded = get(5).Count > 0
	return v, nil
}
