package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// A rollout's records (rollout/REV/spec, control, good/*, bad/*) grow by
// one key per host that needed a slot, and nothing else deletes them. So
// a finished rollout older than the newest few is folded: its summary
// (summary/REV: counts, the first bad hosts with why, when, by whom) is
// written and its per-host records deleted, in transactions of bounded
// size. There is no controller: the host that records a new rollout's
// spec folds (Member.foldSoon), once per rollout, off its admission path;
// the summary is written only where none is (a compare on its key), so
// two folders never both fold one rollout.

// KeepRollouts is how many of the newest rollouts keep their per-host
// records. The newest is the one hosts are taking; the one before it is
// the revision a host still judging reports its verdict on (one revision
// on trial at a time), and a third leaves a rollout superseded half-way
// readable while its successor settles. fleet status shows the newest.
const KeepRollouts = 3

// maxSummaries bounds the summaries kept (the oldest go first), so that
// even they do not grow for ever: a hundred rollouts is months of
// history, and about 100 KB.
const maxSummaries = 100

// maxSummaryBad bounds the bad hosts a summary names, with why; it counts
// the rest.
const maxSummaryBad = 10

// foldBatch is how many operations one transaction of a fold holds: etcd
// refuses a transaction of more than its --max-txn-ops (128 by default).
const foldBatch = 100

// Summary states, besides StateAborted.
const (
	// SummaryComplete: every live host was good on it when it was folded.
	SummaryComplete = "complete"
	// SummarySuperseded: newer rollouts took over before every live host
	// was good on it.
	SummarySuperseded = "superseded"
	// SummaryFailed: it was paused by its failures (the failure threshold,
	// or a bad canary) and newer rollouts took over.
	SummaryFailed = "failed"
)

// Summary is what is left of a folded rollout.
type Summary struct {
	Schema   int    `json:"schema,omitempty"`
	Revision string `json:"revision"`
	// State is complete, superseded, failed or aborted; Why says who
	// aborted it, or which failures paused it.
	State   string           `json:"state"`
	Why     string           `json:"why,omitempty"`
	Rollout resource.Rollout `json:"rollout"`
	// Started and StartedBy are from its spec; Completed is when its last
	// record was written (the last verdict, or the abort).
	Started   time.Time `json:"started"`
	StartedBy string    `json:"startedBy"`
	Completed time.Time `json:"completed,omitzero"`
	Good      int       `json:"good"`
	Bad       int       `json:"bad"`
	// BadHosts are the first bad hosts (at most 10), with why.
	BadHosts []BadHost `json:"badHosts"`
	FoldedBy string    `json:"foldedBy"`
	FoldedAt time.Time `json:"foldedAt"`
}

// BadHost is a host that was bad on a folded rollout's revision.
type BadHost struct {
	Host string `json:"host"`
	Why  string `json:"why,omitempty"`
}

func (s *Summary) check() error {
	if s.Revision == "" {
		return errors.New("names no revision")
	}
	switch s.State {
	case SummaryComplete, SummarySuperseded, SummaryFailed, StateAborted:
	default:
		return fmt.Errorf("state %q is none of %s, %s, %s, %s", clip(s.State, 64), SummaryComplete, SummarySuperseded, SummaryFailed, StateAborted)
	}
	if len(s.BadHosts) > maxSummaryBad {
		return fmt.Errorf("names %d bad hosts; a summary names at most %d", len(s.BadHosts), maxSummaryBad)
	}
	for _, b := range s.BadHosts {
		if err := checkHost(b.Host); err != nil {
			return err
		}
	}
	ro, err := s.Rollout.Settle()
	if err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	s.Rollout = ro
	return nil
}

// ErrFolded is wrapped by a FoldedError.
var ErrFolded = errors.New("rollout folded")

// FoldedError says that a rollout verb named a rollout that was folded,
// with its summary.
type FoldedError struct {
	Fleet   string
	Summary Summary
	// Ignored says why the summary record does not pass, when it does not
	// (Summary then holds its revision alone).
	Ignored string
}

func (e *FoldedError) Error() string {
	s := e.Summary
	if e.Ignored != "" {
		return fmt.Sprintf("the rollout of %s in fleet %s is over and folded: its per-host records are deleted, and its summary is ignored (%s)", s.Revision, e.Fleet, e.Ignored)
	}
	return fmt.Sprintf("the rollout of %s in fleet %s is over and folded into a summary by %s at %s (its per-host records are deleted; the newest %d rollouts keep theirs): %s",
		s.Revision, e.Fleet, printed(s.FoldedBy), s.FoldedAt.Format(time.RFC3339), KeepRollouts, s.Text())
}

func (e *FoldedError) Is(target error) bool { return target == ErrFolded }

// Text is the summary in one line, cleaned for a terminal.
func (s Summary) Text() string {
	var b strings.Builder
	b.WriteString(s.State)
	if s.Why != "" {
		b.WriteString(" (" + printed(s.Why) + ")")
	}
	fmt.Fprintf(&b, "; good %d, bad %d", s.Good, s.Bad)
	for i, h := range s.BadHosts {
		if i == 3 {
			fmt.Fprintf(&b, " and %d more", s.Bad-i)
			break
		}
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		b.WriteString(sep + printed(h.Host) + because(printed(clip(h.Why, 200))))
	}
	fmt.Fprintf(&b, "; started %s by %s", s.Started.Format(time.RFC3339), printed(orSomeone(s.StartedBy)))
	if !s.Completed.IsZero() {
		b.WriteString(", completed " + s.Completed.Format(time.RFC3339))
	}
	return b.String()
}

func (c *Client) summaryKey(rev string) string { return c.key("summary", revKey(rev)) }

// Folded returns a *FoldedError when the rollout of rev was folded, and
// nil when it was not.
func (c *Client) Folded(ctx context.Context, rev string) error {
	var resp *clientv3.GetResponse
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		resp, err = c.cli.Get(ctx, c.summaryKey(rev))
		return err
	})
	if err != nil || len(resp.Kvs) == 0 {
		return err
	}
	kv := pairs(resp)[0]
	s, err := decode[Summary](kv.value)
	if err == nil && s.Revision != rev {
		err = fmt.Errorf("names revision %q, not its key's", clip(s.Revision, 100))
	}
	if err != nil {
		c.ignore(kv, err)
		return &FoldedError{Fleet: c.cfg.Fleet, Summary: Summary{Revision: rev}, Ignored: err.Error()}
	}
	return &FoldedError{Fleet: c.cfg.Fleet, Summary: s}
}

// FoldedCount is how many rollouts are folded, and the revisions of the
// newest few (at most n), newest first.
func (c *Client) FoldedCount(ctx context.Context, n int) (int, []string, error) {
	var resp *clientv3.GetResponse
	base := c.key("summary") + "/"
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		resp, err = c.cli.Get(ctx, base, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(int64(n)))
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	var revs []string
	for _, kv := range resp.Kvs {
		revs = append(revs, unescapeRev(strings.TrimPrefix(string(kv.Key), base)))
	}
	return int(resp.Count), revs, nil
}

// Fold folds the rollouts that are over and older than the newest
// KeepRollouts into summaries, deleting their per-host records, and
// returns their revisions. It never folds a rollout a host holds a slot
// on (in progress), one paused by hand (it waits for an operator's
// resume or abort), one whose spec it cannot read, nor the newest
// complete one (the revision a rollback of the fleet would go back to).
// One paused by its failures is folded once newer rollouts took over:
// no host asks for it again, and a bad revision a week would otherwise
// keep its records for ever. by is who folds.
func (c *Client) Fold(ctx context.Context, by string) ([]string, error) {
	refs, at, err := c.rolloutsByAge(ctx, 0)
	if err != nil {
		return nil, err
	}
	slots := newView()
	if err := c.readSlots(ctx, at, slots); err != nil {
		return nil, err
	}
	live, err := c.count(ctx, at, c.key("presence")+"/")
	if err != nil {
		return nil, err
	}
	var folded []string
	pinned := false // the newest complete rollout is kept
	for i, ref := range refs {
		if ref.specRev == 0 {
			continue // no spec: the orphans below, or one a resume cleared
		}
		if i < KeepRollouts && pinned {
			continue
		}
		rr, err := c.readRolloutAt(ctx, at, ref.rev)
		if err != nil {
			return folded, err
		}
		v := rr.v
		v.transit, v.live = slots.transit, int(live)
		complete := v.complete(ref.rev)
		keep := i < KeepRollouts || !pinned && complete || v.spec == nil || v.inProgress(ref.rev) || v.paused()
		pinned = pinned || complete
		if keep {
			continue
		}
		ok, err := c.fold(ctx, at, ref.rev, rr, complete, by)
		if err != nil {
			return folded, err
		}
		if ok {
			folded = append(folded, ref.rev)
		}
	}
	// Records written under a folded rollout after its fold (a verdict
	// from a host whose slot had ended): its summary stands, they go.
	for _, ref := range refs {
		if ref.specRev != 0 {
			continue
		}
		n, err := c.count(ctx, 0, c.summaryKey(ref.rev))
		if err != nil || n == 0 {
			continue
		}
		if err := c.deletePrefix(ctx, c.key("rollout", revKey(ref.rev))+"/"); err != nil {
			return folded, err
		}
	}
	return folded, c.trimSummaries(ctx)
}

// complete reports whether every live host is good on rev, with none in
// transit on it and none of its failures counting.
func (v *rolloutView) complete(rev string) bool {
	if v.spec == nil || v.inProgress(rev) {
		return false
	}
	st, _ := v.state(v.spec.Rollout)
	return st == StateProgressing && len(v.good) >= v.live
}

// inProgress reports whether a host holds a slot on rev.
func (v *rolloutView) inProgress(rev string) bool {
	for _, s := range v.transit {
		if s.Revision == rev {
			return true
		}
	}
	return false
}

// paused reports whether the rollout was paused by hand (fleet rollout
// pause), not by its failures.
func (v *rolloutView) paused() bool {
	return v.control != nil && v.control.State == StatePaused
}

// fold writes rev's summary where none is, deleting its spec and control
// with it (the rollout is gone from every list at once), if none of its
// records changed since at; then deletes the rest of its records in
// batches. It reports false when another folder was first, or the
// rollout moved.
func (c *Client) fold(ctx context.Context, at int64, rev string, rr *rolloutRead, complete bool, by string) (bool, error) {
	v := rr.v
	base := c.key("rollout", revKey(rev)) + "/"
	s := Summary{Schema: Schema, Revision: rev, State: SummarySuperseded, Rollout: v.spec.Rollout, Started: v.spec.At, StartedBy: v.spec.By,
		Good: len(v.good), Bad: len(v.bad), BadHosts: []BadHost{}, FoldedBy: clip(by, maxNameBytes), FoldedAt: time.Now().UTC()}
	switch st, _ := v.state(v.spec.Rollout); {
	case st == StateAborted:
		s.State, s.Completed = StateAborted, v.control.At
		s.Why = clip(fmt.Sprintf("aborted by %s at %s%s", orSomeone(v.control.By), v.control.At.Format(time.RFC3339), because(v.control.Why)), maxTextBytes)
	case st == StatePaused && len(v.good) < v.spec.Rollout.Canary:
		s.State, s.Why = SummaryFailed, "a canary host was bad"
	case st == StatePaused:
		s.State, s.Why = SummaryFailed, fmt.Sprintf("%d bad hosts reached the failure threshold (%d)", len(v.failures()), v.spec.Rollout.FailureThreshold)
	case complete:
		s.State = SummaryComplete
	}
	for _, h := range sortedKeys(v.bad) {
		if len(s.BadHosts) < maxSummaryBad {
			s.BadHosts = append(s.BadHosts, BadHost{Host: h, Why: clip(v.bad[h].Why, 500)})
		}
		if at := v.bad[h].At; at.After(s.Completed) {
			s.Completed = at
		}
	}
	last, err := c.lastGood(ctx, at, base+"good/")
	if err != nil {
		return false, err
	}
	if last.After(s.Completed) {
		s.Completed = last
	}
	doc, _ := json.Marshal(s)
	// The spec and control first: with the summary, in the first
	// transaction.
	keys := slices.Clone(rr.keys)
	slices.SortStableFunc(keys, func(a, b string) int { return boolInt(!isHead(a, base)) - boolInt(!isHead(b, base)) })
	n := min(len(keys), foldBatch-1)
	ops := []clientv3.Op{clientv3.OpPut(c.summaryKey(rev), string(doc))}
	for _, k := range keys[:n] {
		ops = append(ops, clientv3.OpDelete(k))
	}
	var ok bool
	err = c.call(ctx, func(ctx context.Context) error {
		resp, err := c.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(c.summaryKey(rev)), "=", 0),
			clientv3.Compare(clientv3.ModRevision(base), "<", at+1).WithPrefix(),
		).Then(ops...).Commit()
		if err == nil {
			ok = resp.Succeeded
		}
		return err
	})
	if err != nil || !ok {
		return false, err
	}
	if err := c.deleteKeys(ctx, keys[n:]); err != nil {
		return true, err
	}
	c.log.Info("fleet rollout folded", "revision", rev, "state", s.State, "good", s.Good, "bad", s.Bad, "records", len(keys))
	return true, nil
}

func isHead(key, base string) bool { return key == base+"spec" || key == base+"control" }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lastGood is the time of the last good verdict below prefix at
// revision at (zero when there is none, or it does not pass).
func (c *Client) lastGood(ctx context.Context, at int64, prefix string) (time.Time, error) {
	var resp *clientv3.GetResponse
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		resp, err = c.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(at),
			clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
		return err
	})
	if err != nil || len(resp.Kvs) == 0 {
		return time.Time{}, err
	}
	d, err := decode[verdictDoc](resp.Kvs[0].Value)
	if err != nil {
		return time.Time{}, nil
	}
	return d.At, nil
}

// deleteKeys deletes keys, foldBatch a transaction.
func (c *Client) deleteKeys(ctx context.Context, keys []string) error {
	for chunk := range slices.Chunk(keys, foldBatch) {
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpDelete(k)
		}
		err := c.call(ctx, func(ctx context.Context) error {
			_, err := c.cli.Txn(ctx).Then(ops...).Commit()
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// deletePrefix deletes every key below prefix, in batches.
func (c *Client) deletePrefix(ctx context.Context, prefix string) error {
	kvs, _, err := c.scanPrefix(ctx, 0, prefix, true)
	if err != nil {
		return err
	}
	keys := make([]string, len(kvs))
	for i, kv := range kvs {
		keys[i] = kv.key
	}
	return c.deleteKeys(ctx, keys)
}

// trimSummaries deletes the oldest summaries beyond maxSummaries.
func (c *Client) trimSummaries(ctx context.Context) error {
	base := c.key("summary") + "/"
	n, err := c.count(ctx, 0, base)
	if err != nil || n <= maxSummaries {
		return err
	}
	var resp *clientv3.GetResponse
	err = c.call(ctx, func(ctx context.Context) error {
		var err error
		resp, err = c.cli.Get(ctx, base, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(n-maxSummaries))
		return err
	})
	if err != nil {
		return err
	}
	keys := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		keys[i] = string(kv.Key)
	}
	return c.deleteKeys(ctx, keys)
}

// count is how many keys are below prefix (or are key, for a key
// without a trailing '/'), at revision at (0: the newest).
func (c *Client) count(ctx context.Context, at int64, prefix string) (int64, error) {
	opts := []clientv3.OpOption{clientv3.WithCountOnly()}
	if strings.HasSuffix(prefix, "/") {
		opts = append(opts, clientv3.WithPrefix())
	}
	if at > 0 {
		opts = append(opts, clientv3.WithRev(at))
	}
	var n int64
	err := c.call(ctx, func(ctx context.Context) error {
		resp, err := c.cli.Get(ctx, prefix, opts...)
		if err == nil {
			n = resp.Count
		}
		return err
	})
	return n, err
}

// folder folds old rollouts when asked (foldSoon), one fold at a time,
// off the admission path.
func (m *Member) folder(ctx context.Context) {
	defer m.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.fold:
		}
		revs, err := m.Fold(ctx, m.host.Name)
		if err != nil && ctx.Err() == nil {
			m.log.Warn("fleet fold of old rollouts failed; the next new rollout tries again", "error", err)
		}
		if len(revs) > 0 {
			m.log.Info("fleet rollouts folded", "host", m.host.Name, "count", len(revs))
		}
	}
}

// foldSoon asks the folder to fold: the host that recorded a new
// rollout's spec does, once per rollout.
func (m *Member) foldSoon() {
	select {
	case m.fold <- struct{}{}:
	default:
	}
}
