package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Report is the fleet as etcd knows it: `cortex-sync fleet status`.
type Report struct {
	Fleet string `json:"fleet"`
	// Head is the newest revision any live host fetched (by commit time),
	// or the one asked for: converged means every live host is on it.
	Head      string            `json:"head,omitempty"`
	Converged bool              `json:"converged"`
	Hosts     []HostRow         `json:"hosts"`
	Revisions []RevisionSummary `json:"revisions"`
	Rollouts  []RolloutStatus   `json:"rollouts"`
	// Singletons are the singletons hosts campaign for, and who holds each.
	Singletons []SingletonStatus `json:"singletons"`
	// Ignored are the records read and ignored, with why: any member can
	// write any key, in the schema of its own version (record.go).
	Ignored []Ignored `json:"ignored"`
}

// SingletonStatus is one singleton: the host that holds it (its oldest
// live candidate) and the hosts that wait to.
type SingletonStatus struct {
	Name       string   `json:"name"`
	Holder     string   `json:"holder"`
	Candidates []string `json:"candidates"` // in the order they would hold it
}

// HostRow is one host: its last status, whether it is live, and its part
// in the rollout of the head.
type HostRow struct {
	HostStatus
	// Stale is true when the host's presence lease has expired: its agent
	// is down or cut off, and the row is what it last said.
	Stale bool `json:"stale"`
	// OnLastGood is true when the revision the host is on is the last
	// one that was good there.
	OnLastGood bool `json:"onLastGood"`
	// BehindHead is true when the host is not on the newest revision it
	// fetched (its head): it rolled back from it, waits for a slot, or
	// is held.
	BehindHead bool   `json:"behindHead"`
	Held       string `json:"held,omitempty"` // why, when held
	// Phase is the rollout phase as the fleet sees it: applying, good,
	// bad, stalled, waiting, window (waiting for its deploy window: see
	// WindowOpens), held, or "" (nothing to roll out).
	Phase string `json:"phase,omitempty"`
}

// RevisionSummary counts the live hosts on one revision.
type RevisionSummary struct {
	Revision string `json:"revision"`
	Hosts    int    `json:"hosts"`
	Synced   int    `json:"synced"`
	Healthy  int    `json:"healthy"`
	Stale    int    `json:"stale"`
}

// RolloutStatus is one revision's rollout.
type RolloutStatus struct {
	Revision       string    `json:"revision"`
	Started        time.Time `json:"started"`
	StartedBy      string    `json:"startedBy"`
	MaxUnavailable string    `json:"maxUnavailable"`
	Canary         int       `json:"canary"`
	MinReady       string    `json:"minReady"`
	// State is canary, progressing, complete (every live host good on
	// it), paused or aborted; Why says why not
	// progressing.
	State    string   `json:"state"`
	Why      string   `json:"why,omitempty"`
	Applying []string `json:"applying"`
	Good     []string `json:"good"`
	Bad      []string `json:"bad"`
	Stalled  []string `json:"stalled"`
	// Newest is true for the most recently started rollout.
	Newest bool `json:"newest"`
	order  int64
}

// readPage is how many keys one range request returns at most: a large
// prefix is read page by page at one revision, so that each answer is
// bounded in bytes and time.
const readPage = 1000

// maxRollouts bounds the rollouts a read lists. Folding keeps a fleet at
// KeepRollouts and the few in progress or paused; past this many, folding
// is stuck (or the keys forged), and a read does not follow them all.
const maxRollouts = 256

// Read reads the fleet at one etcd revision: presence (keys only),
// status, slots, holds, singletons and the rollouts not folded, never the
// whole prefix, so that its cost does not grow with the rollouts a fleet
// has had. head, when not "", is the revision every live host should be
// on; else the newest head the hosts report.
func (c *Client) Read(ctx context.Context, head string) (*Report, error) {
	for try := 0; ; try++ {
		r, err := c.read(ctx, head)
		if try < 2 && errors.Is(err, rpctypes.ErrCompacted) {
			continue // compacted between two pages: read again, at a newer revision
		}
		return r, err
	}
}

func (c *Client) read(ctx context.Context, head string) (*Report, error) {
	kvs, at, err := c.scanPrefix(ctx, 0, c.key("presence")+"/", true)
	if err != nil {
		return nil, err
	}
	for _, p := range []string{"status", "singleton"} {
		more, _, err := c.scanPrefix(ctx, at, c.key(p)+"/", false)
		if err != nil {
			return nil, err
		}
		kvs = append(kvs, more...)
	}
	v := newView()
	if err := c.readSlots(ctx, at, v); err != nil {
		return nil, err
	}
	holds, _, err := c.scanPrefix(ctx, at, c.key("hold")+"/", false)
	if err != nil {
		return nil, err
	}
	c.parseSlots(v, holds)
	revs, _, err := c.listRollouts(ctx, at)
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	statuses := map[string]HostStatus{}
	r := &Report{Fleet: c.cfg.Fleet, Hosts: []HostRow{}, Revisions: []RevisionSummary{}, Rollouts: []RolloutStatus{}, Singletons: []SingletonStatus{}}
	singles := map[string][]*kvPair{}
	ignore := func(kv *kvPair, err error) { r.Ignored = append(r.Ignored, c.ignore(kv, err)) }
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.key, c.prefix)
		kind, name, _ := strings.Cut(rest, "/")
		switch kind {
		case "presence":
			if err := checkHost(name); err != nil {
				ignore(kv, err)
				continue
			}
			live[name] = true
		case "status":
			if err := checkHost(name); err != nil {
				ignore(kv, err)
				continue
			}
			s, err := decode[HostStatus](kv.value)
			if err == nil && s.Host != name {
				err = fmt.Errorf("names host %q, not its key's", clip(s.Host, 64))
			}
			if err != nil {
				ignore(kv, err)
				continue
			}
			statuses[name] = s
		case "singleton":
			if single, _, ok := strings.Cut(name, "/"); ok {
				singles[single] = append(singles[single], kv)
			}
		}
	}
	for _, name := range sortedKeys(singles) {
		kvs := singles[name]
		slices.SortFunc(kvs, func(a, b *kvPair) int { return cmp.Compare(a.createRev, b.createRev) })
		ss := SingletonStatus{Name: name, Holder: c.candidate(kvs[0], ignore), Candidates: []string{}}
		for _, kv := range kvs[1:] {
			ss.Candidates = append(ss.Candidates, c.candidate(kv, ignore))
		}
		r.Singletons = append(r.Singletons, ss)
	}
	now := time.Now()
	views := map[string]*rolloutView{}
	for _, rev := range revs {
		rr, err := c.readRolloutAt(ctx, at, rev)
		if err != nil {
			return nil, err
		}
		if rr.specRev == 0 {
			continue // no spec: not a rollout anyone started (or its spec was removed)
		}
		rv := rr.v
		rv.transit, rv.held, rv.live = v.transit, v.held, len(live)
		r.Ignored = append(r.Ignored, rv.ignored...)
		s := rv.spec
		if s == nil {
			// Its spec is ignored: the hosts go by their own fleet.yaml,
			// which this reader does not have.
			r.Rollouts = append(r.Rollouts, RolloutStatus{Revision: rev, State: StateUnknown, Why: "its recorded spec is ignored: " + rv.specIgnored,
				Applying: []string{}, Good: sortedKeys(rv.good), Bad: sortedKeys(rv.bad), Stalled: []string{}, order: rr.specRev})
			continue
		}
		views[s.Revision] = rv
		st, why := rv.state(s.Rollout)
		rs := RolloutStatus{Revision: s.Revision, Started: s.At, StartedBy: s.By, MaxUnavailable: s.Rollout.MaxUnavailable.String(),
			Canary: s.Rollout.Canary, MinReady: s.Rollout.MinReady.Std().String(), State: st, Why: why,
			Applying: []string{}, Good: sortedKeys(rv.good), Bad: sortedKeys(rv.bad), Stalled: []string{}, order: rr.specRev}
		for h, slot := range v.transit {
			if slot.Revision != s.Revision {
				continue
			}
			if stalled(slot, s.Rollout, now) {
				rs.Stalled = append(rs.Stalled, h)
			} else {
				rs.Applying = append(rs.Applying, h)
			}
		}
		slices.Sort(rs.Applying)
		slices.Sort(rs.Stalled)
		if rs.State == StateProgressing && len(rs.Applying)+len(rs.Stalled) == 0 && len(rv.good) >= len(live) {
			rs.State = StateComplete // every live host good on it
		}
		r.Rollouts = append(r.Rollouts, rs)
	}
	slices.SortFunc(r.Rollouts, func(a, b RolloutStatus) int { return cmp.Compare(a.order, b.order) })
	if n := len(r.Rollouts); n > 0 {
		r.Rollouts[n-1].Newest = true
	}

	r.Head = head
	if r.Head == "" {
		var best HostStatus
		for h, s := range statuses {
			if live[h] && s.Head != "" && (best.Head == "" || s.HeadTime.After(best.HeadTime) || s.HeadTime.Equal(best.HeadTime) && s.Head > best.Head) {
				best = s
			}
		}
		r.Head = best.Head
	}
	hosts := sortedKeys(statuses)
	for h := range live {
		if _, ok := statuses[h]; !ok {
			hosts = append(hosts, h) // present, no status written yet
			statuses[h] = HostStatus{Host: h}
		}
	}
	slices.Sort(hosts)
	byRev := map[string]*RevisionSummary{}
	r.Converged = len(live) > 0
	for _, h := range hosts {
		s := statuses[h]
		row := HostRow{HostStatus: s, Stale: !live[h]}
		row.OnLastGood = s.LastGood != "" && s.Revision == s.LastGood
		row.BehindHead = s.Head != "" && s.Head != s.Revision
		if hd, ok := v.held[h]; ok {
			row.Held = fmt.Sprintf("by %s at %s%s", orSomeone(hd.By), hd.At.Format(time.RFC3339), because(hd.Why))
		}
		row.Phase = phaseOf(row, r.Head, views[r.Head], v.transit[h], now)
		r.Hosts = append(r.Hosts, row)
		sum := byRev[s.Revision]
		if sum == nil {
			sum = &RevisionSummary{Revision: s.Revision}
			byRev[s.Revision] = sum
		}
		if row.Stale {
			sum.Stale++
			continue
		}
		sum.Hosts++
		if s.Sync == "Synced" {
			sum.Synced++
		}
		if s.Health == "Healthy" {
			sum.Healthy++
		}
		if s.Revision != r.Head || s.Sync != "Synced" || s.Health != "Healthy" {
			r.Converged = false
		}
	}
	for _, k := range sortedKeys(byRev) {
		r.Revisions = append(r.Revisions, *byRev[k])
	}
	r.Ignored = append(r.Ignored, v.ignored...)
	slices.SortFunc(r.Ignored, func(a, b Ignored) int { return cmp.Compare(a.Key, b.Key) })
	r.Ignored = slices.CompactFunc(r.Ignored, func(a, b Ignored) bool { return a.Key == b.Key })
	if r.Ignored == nil {
		r.Ignored = []Ignored{}
	}
	if r.Head == "" {
		r.Converged = false
	}
	return r, nil
}

// readSlots reads the open slots (the hosts in transit) at revision at
// into v. It is the one place outside admission that knows where slots
// are kept.
func (c *Client) readSlots(ctx context.Context, at int64, v *rolloutView) error {
	kvs, _, err := c.scanPrefix(ctx, at, c.key("slot")+"/", false)
	if err != nil {
		return err
	}
	legacy, _, err := c.scanPrefix(ctx, at, c.key("transit")+"/", false) // hosts before schema 3
	if err != nil {
		return err
	}
	c.parseSlots(v, append(kvs, legacy...))
	return nil
}

// scanPrefix reads every key below prefix at revision at (0: the newest,
// which it returns), readPage keys a request; keysOnly leaves the values
// out.
func (c *Client) scanPrefix(ctx context.Context, at int64, prefix string, keysOnly bool) ([]*kvPair, int64, error) {
	return c.scan(ctx, at, prefix, clientv3.GetPrefixRangeEnd(prefix), keysOnly)
}

// scan reads the keys in [from, end) as scanPrefix does.
func (c *Client) scan(ctx context.Context, at int64, from, end string, keysOnly bool) ([]*kvPair, int64, error) {
	var out []*kvPair
	for {
		resp, rev, err := c.page(ctx, at, from, end, readPage, keysOnly)
		if err != nil {
			return nil, 0, err
		}
		at = rev
		out = append(out, pairs(resp)...)
		if !resp.More || len(resp.Kvs) == 0 {
			return out, at, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// page reads up to limit keys of [from, end) at revision at (0: the
// newest, which it returns); keysOnly leaves the values out.
func (c *Client) page(ctx context.Context, at int64, from, end string, limit int64, keysOnly bool) (*clientv3.GetResponse, int64, error) {
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
	if at > 0 {
		opts = append(opts, clientv3.WithRev(at))
	}
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	var resp *clientv3.GetResponse
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		resp, err = c.cli.Get(ctx, from, opts...)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if at == 0 {
		at = resp.Header.Revision
	}
	return resp, at, nil
}

// listRollouts lists the revisions that have records below rollout/ at
// revision at (0: the newest, which it returns), at most maxRollouts, in
// key order. It skips over each revision's records instead of reading
// them: a few keys a request, whatever a rollout's size.
func (c *Client) listRollouts(ctx context.Context, at int64) ([]string, int64, error) {
	base := c.key("rollout") + "/"
	end := clientv3.GetPrefixRangeEnd(base)
	from := base
	var revs []string
	for len(revs) < maxRollouts {
		resp, rev, err := c.page(ctx, at, from, end, 32, true)
		if err != nil {
			return nil, 0, err
		}
		at = rev
		var last string
		for _, kv := range resp.Kvs {
			rk, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), base), "/")
			if rk != last && len(revs) < maxRollouts {
				revs = append(revs, unescapeRev(rk))
			}
			last = rk
		}
		if !resp.More || last == "" {
			break
		}
		from = clientv3.GetPrefixRangeEnd(base + last + "/")
	}
	return slices.Compact(revs), at, nil
}

// rolloutRef is a revision with records below rollout/, and the create
// revision of its spec key (0: it has none).
type rolloutRef struct {
	rev     string
	specRev int64
}

// rolloutsByAge lists the rollouts at revision at (0: the newest, which
// it returns), newest spec first; those without a spec come last.
func (c *Client) rolloutsByAge(ctx context.Context, at int64) ([]rolloutRef, int64, error) {
	revs, at, err := c.listRollouts(ctx, at)
	if err != nil {
		return nil, 0, err
	}
	refs := make([]rolloutRef, len(revs))
	for i, rev := range revs {
		refs[i].rev = rev
	}
	for chunk := range slices.Chunk(refs, foldBatch) {
		ops := make([]clientv3.Op, len(chunk))
		for i, ref := range chunk {
			ops[i] = clientv3.OpGet(c.key("rollout", revKey(ref.rev), "spec"), clientv3.WithKeysOnly(), clientv3.WithRev(at))
		}
		err := c.call(ctx, func(ctx context.Context) error {
			resp, err := c.cli.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				return err
			}
			for i, r := range resp.Responses {
				if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
					chunk[i].specRev = kvs[0].CreateRevision
				}
			}
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
	}
	slices.SortStableFunc(refs, func(a, b rolloutRef) int { return cmp.Compare(b.specRev, a.specRev) })
	return refs, at, nil
}

// rolloutRead is what readRolloutAt read of one rollout: the view, every
// key of the rollout, and its spec key's create revision (0: none).
type rolloutRead struct {
	v       *rolloutView
	keys    []string
	specRev int64
}

// readRolloutAt reads the records of rev's rollout at revision at: the
// good verdicts as keys alone (the key is the verdict), the rest with
// their values.
func (c *Client) readRolloutAt(ctx context.Context, at int64, rev string) (*rolloutRead, error) {
	base := c.key("rollout", revKey(rev)) + "/"
	good := base + "good/"
	before, _, err := c.scan(ctx, at, base, good, false)
	if err != nil {
		return nil, err
	}
	after, _, err := c.scan(ctx, at, clientv3.GetPrefixRangeEnd(good), clientv3.GetPrefixRangeEnd(base), false)
	if err != nil {
		return nil, err
	}
	goods, _, err := c.scanPrefix(ctx, at, good, true)
	if err != nil {
		return nil, err
	}
	rr := &rolloutRead{v: newView()}
	rr.v.rev = at
	kvs := append(before, after...)
	c.parseRollout(rr.v, rev, kvs)
	for _, kv := range kvs {
		rr.keys = append(rr.keys, kv.key)
		if kv.key == base+"spec" {
			rr.specRev = kv.createRev
		}
	}
	for _, kv := range goods {
		rr.keys = append(rr.keys, kv.key)
		host := strings.TrimPrefix(kv.key, good)
		if err := checkHost(host); err != nil {
			rr.v.ignored = append(rr.v.ignored, c.ignore(kv, err))
			continue
		}
		rr.v.good[host] = verdictDoc{}
	}
	return rr, nil
}

// phaseOf is a host's part in the rollout of head.
func phaseOf(row HostRow, head string, v *rolloutView, slot slotDoc, now time.Time) string {
	if !row.WindowOpens.IsZero() && !row.Stale && head != "" && row.Head == head && row.Revision != head && slot.Revision != head {
		return PhaseWindow
	}
	switch {
	case v == nil || head == "":
		return ""
	case slot.Revision == head && v.spec != nil && stalled(slot, v.spec.Rollout, now):
		return "stalled"
	case slot.Revision == head:
		return PhaseApplying
	}
	if _, ok := v.bad[row.Host]; ok {
		return PhaseBad
	}
	if _, ok := v.good[row.Host]; ok {
		return PhaseGood
	}
	switch {
	case row.Held != "":
		return "held"
	case row.Revision != head && !row.Stale:
		return "waiting"
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ErrNoRollout is returned when a rollout verb names no rollout that
// exists.
var ErrNoRollout = errors.New("no such rollout")

// newestRollout is the revision of the rollout started last (not
// folded: a fold never takes the newest).
func (c *Client) newestRollout(ctx context.Context) (string, error) {
	refs, _, err := c.rolloutsByAge(ctx, 0)
	if err != nil {
		return "", err
	}
	if len(refs) == 0 || refs[0].specRev == 0 {
		return "", fmt.Errorf("%w: fleet %s has no rollout yet", ErrNoRollout, c.cfg.Fleet)
	}
	return refs[0].rev, nil
}

// ErrNothingToResume is wrapped when a resume cannot move a rollout:
// it is not stopped, or its state cannot be read.
var ErrNothingToResume = errors.New("nothing to resume")

// SetRollout pauses (StatePaused), resumes (StateActive) or aborts
// (StateAborted) the rollout of rev ("": the newest), and returns the
// revision acted on. A resume forgives the failures so far: they no
// longer count against the budget or the failure threshold. A resume
// never says it moved a rollout it cannot move: one not paused or
// aborted with no failure to forgive, or one whose recorded spec is of a
// newer cortex-sync, is an
// error (ErrNothingToResume) that says why; one whose recorded spec does
// not pass is resumed and its spec removed, so that the next host to
// take a slot records its own.
func (c *Client) SetRollout(ctx context.Context, rev, state, by, why string) (string, error) {
	if rev == "" {
		var err error
		if rev, err = c.newestRollout(ctx); err != nil {
			return "", err
		}
	}
	if err := c.Folded(ctx, rev); err != nil {
		return "", err // over and folded (a *FoldedError), or etcd unread
	}
	spec := c.key("rollout", revKey(rev), "spec")
	doc, _ := json.Marshal(controlDoc{Schema: Schema, State: state, By: clip(by, maxNameBytes), Why: clip(why, maxTextBytes), At: time.Now().UTC()})
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(spec), ">", 0)}
	ops := []clientv3.Op{clientv3.OpPut(c.key("rollout", revKey(rev), "control"), string(doc))}
	if state == StateActive {
		var v *rolloutView
		err := c.call(ctx, func(ctx context.Context) error {
			var err error
			v, err = c.readRollout(ctx, rev)
			return err
		})
		if err != nil {
			return "", err
		}
		if err := v.resumable(rev, spec, c); err != nil {
			return "", err
		}
		// What was decided on must not change before the write.
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(c.key("rollout", revKey(rev))+"/"), "<", v.rev+1).WithPrefix())
		if v.spec == nil {
			ops = append(ops, clientv3.OpDelete(spec))
			c.log.Warn("fleet rollout spec removed on resume: it does not pass", "revision", rev, "reason", v.specIgnored)
		}
	}
	var ok bool
	err := c.call(ctx, func(ctx context.Context) error {
		resp, err := c.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err == nil {
			ok = resp.Succeeded
		}
		return err
	})
	if err != nil {
		return "", err
	}
	if !ok && state == StateActive {
		return "", fmt.Errorf("%w: the rollout of %s changed while it was resumed (fleet %s); see cortex-sync fleet rollout status, and resume again", ErrNothingToResume, rev, c.cfg.Fleet)
	}
	if !ok {
		return "", fmt.Errorf("%w: fleet %s has no rollout of %s (cortex-sync fleet rollout status lists them)", ErrNoRollout, c.cfg.Fleet, rev)
	}
	return rev, nil
}

// resumable says why a resume cannot move the rollout of rev, as v read
// it: nil when it can.
func (v *rolloutView) resumable(rev, specKey string, c *Client) error {
	key := strings.TrimPrefix(specKey, c.prefix)
	switch {
	case v.spec == nil && v.specIgnored == "":
		return fmt.Errorf("%w: fleet %s has no rollout of %s (cortex-sync fleet rollout status lists them)", ErrNoRollout, c.cfg.Fleet, rev)
	case v.specNewer:
		return fmt.Errorf("%w: the rollout of %s in fleet %s cannot be read here: its spec (%s) is %s; resume it with a cortex-sync of that version",
			ErrNothingToResume, rev, c.cfg.Fleet, key, v.specIgnored)
	case v.spec == nil:
		return nil // resumed, and the spec that does not pass removed
	}
	st, why := v.state(v.spec.Rollout)
	switch {
	case st == StatePaused, st == StateAborted:
		return nil
	case len(v.failures()) > 0:
		return nil // failures that use up the budget: forgiven, they free it
	}
	onIt := 0
	for _, s := range v.transit {
		if s.Revision == rev {
			onIt++
		}
	}
	if st == StateProgressing && onIt == 0 && len(v.good) >= v.live {
		st, why = StateComplete, "every live host is good on it"
	}
	if why != "" {
		why = " (" + why + ")"
	}
	return fmt.Errorf("%w: the rollout of %s in fleet %s is %s%s, not paused or aborted, and no failure counts against it", ErrNothingToResume, rev, c.cfg.Fleet, st, why)
}

// Hold tells the rollouts to pass host by until Unhold: it takes no slot.
func (c *Client) Hold(ctx context.Context, host, by, why string) error {
	if err := checkName(host); err != nil {
		return fmt.Errorf("host name %q: %w", host, err)
	}
	doc, _ := json.Marshal(holdDoc{Schema: Schema, By: clip(by, maxNameBytes), Why: clip(why, maxTextBytes), At: time.Now().UTC()})
	return c.call(ctx, func(ctx context.Context) error {
		_, err := c.cli.Put(ctx, c.key("hold", host), string(doc))
		return err
	})
}

// Unhold ends a Hold; it reports whether there was one.
func (c *Client) Unhold(ctx context.Context, host string) (bool, error) {
	var n int64
	err := c.call(ctx, func(ctx context.Context) error {
		resp, err := c.cli.Delete(ctx, c.key("hold", host))
		if err == nil {
			n = resp.Deleted
		}
		return err
	})
	return n > 0, err
}

// windowOverrideTTL is how long an override of the deploy windows lasts:
// a host that has not fetched the revision by then waits for its window
// again, and the key does not stay in etcd for ever.
const windowOverrideTTL = 7 * 24 * time.Hour

// OverrideWindow lets rev in outside the hosts' deploy windows (each
// still takes a slot, as the rollout says): the key lives a week.
func (c *Client) OverrideWindow(ctx context.Context, rev, by, why string) error {
	if rev == "" {
		return errors.New("name the revision to let in outside its windows, as fleet status shows it (main@sha1:…)")
	}
	if err := c.Folded(ctx, rev); err != nil {
		return err // its rollout is over: no host waits to take it
	}
	doc, _ := json.Marshal(holdDoc{Schema: Schema, By: clip(by, maxNameBytes), Why: clip(why, maxTextBytes), At: time.Now().UTC()})
	return c.call(ctx, func(ctx context.Context) error {
		lease, err := c.cli.Grant(ctx, int64(windowOverrideTTL/time.Second))
		if err != nil {
			return err
		}
		_, err = c.cli.Put(ctx, c.key("window", revKey(rev)), string(doc), clientv3.WithLease(lease.ID))
		return err
	})
}

// WindowOverridden reports whether rev was let in outside the deploy
// windows (OverrideWindow): one count-only read.
func (c *Client) WindowOverridden(ctx context.Context, rev string) (bool, error) {
	var n int64
	err := c.call(ctx, func(ctx context.Context) error {
		resp, err := c.cli.Get(ctx, c.key("window", revKey(rev)), clientv3.WithCountOnly())
		if err == nil {
			n = resp.Count
		}
		return err
	})
	return n > 0, err
}

func unescapeRev(k string) string {
	if s, err := url.PathUnescape(k); err == nil {
		return s
	}
	return k
}
