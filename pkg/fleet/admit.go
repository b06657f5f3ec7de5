package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Admission costs a host the same whatever the fleet's size: etcd's
// semaphore and queue recipes, not a compare over shared prefixes.
//
//   - A slot is one of maxUnavailable keys, slot/0 … slot/B-1, taken with
//     a compare on that key's create revision alone: a slot taken or freed
//     elsewhere, a verdict, a status write never fail another host's take.
//   - A host that would take one first queues (queue/HOST), in create
//     revision order, and takes the free slot its place names: the first
//     waiter the first free slot, and so on. So hosts do not race for a
//     slot, and a fleet of waiters proposes one write each to queue.
//   - A waiter watches one key: the waiter just ahead of it, or, at the
//     front, the slots; a freed slot wakes the front, whose take wakes the
//     next. Nothing wakes the whole fleet.
//   - Good hosts are counted, not listed; the bad ones are read (they are
//     few: the failure threshold pauses the rollout).
//   - Slots and queue places live on the host's slot lease, kept apart
//     from presence: an offline host's slot frees after SlotTTL.
//
// A take still compares what else it decided on and few hosts write:
// the rollout's control (pause, abort), its bad verdicts, the canary
// places while the canary runs, and the host's hold.

// ErrNotPresent is returned by a rollout step while the host holds no
// lease yet: its slot could not outlive it, so it takes none.
var ErrNotPresent = errors.New("not present in the fleet (no lease yet)")

// busyTries bounds the takes a request tries when another host took the
// slot it aimed at; each waits a jittered, doubling backoff.
const busyTries = 6

// Admit asks for a slot to apply r. Go is true only when this host holds
// a slot: an error (etcd unreachable) or a no means the host stays on its
// revision and goes on healing it. Asking again while holding the slot is
// a go; asking for another revision moves the host to it.
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
			m.dequeue(ctx)
			return Decision{Why: "in maintenance (" + m.maintenance + why + "): the rollout passes this host by until the file is removed", Wait: WaitMaintenance, RetryAfter: retryAfter()}, nil
		}
	}
	m.rearm()
	// While it asks, a new head alone is not written either: the answer
	// carries it (in the slot's transaction), or the host waits.
	m.mu.Lock()
	m.waiting = m.holding != r.ID
	m.askedAt = time.Now()
	m.mu.Unlock()
	for try := 0; ; try++ {
		d, won, err := m.admitOnce(ctx, r)
		if err != nil {
			return Decision{}, err
		}
		m.mu.Lock()
		m.waiting = !won
		m.mu.Unlock()
		if won || !d.Go {
			return d, nil
		}
		// Another host took the slot this one aimed at: the views of the
		// two differed. Back off and read again.
		if try == busyTries {
			return Decision{Why: "the rollout's slots kept changing under this host's request", Wait: WaitBusy, RetryAfter: retryAfter()}, nil
		}
		if !sleep(ctx, backoff(try)) {
			return Decision{}, ctx.Err()
		}
	}
}

// backoff is the wait before try+1: 50 ms doubling to 2 s, ±50 %.
func backoff(try int) time.Duration {
	d := min(50*time.Millisecond<<try, 2*time.Second)
	return d/2 + rand.N(d)
}

// admitOnce is one read, decision and take. A go that was not won means
// the slot was taken meanwhile: try again.
func (m *Member) admitOnce(ctx context.Context, r Revision) (Decision, bool, error) {
	var v *rolloutView
	err := m.call(ctx, func(ctx context.Context) error {
		var err error
		v, err = m.readAdmit(ctx, r.ID, m.host.Name)
		return err
	})
	if err != nil {
		return Decision{}, false, err
	}
	if v.spec != nil && !reflect.DeepEqual(v.spec.Rollout, r.Rollout) {
		v.ignored = append(v.ignored, m.ignore(v.specKV, fmt.Errorf("differs from the rollout: of %s's own fleet.yaml as this host reads it; this host goes by its own", clip(r.ID, 100))))
	}
	m.mu.Lock()
	m.ignored = v.ignored
	holding, slot := m.holding, m.slot
	m.mu.Unlock()
	held := slot != "" && v.slots[slot]
	if held && holding == r.ID {
		m.watchFor(watchTarget{})
		return Decision{Go: true}, true, nil
	}
	if held {
		delete(v.slots, slot) // this host's, on an older revision: it moves
	}
	d := v.decide(m.host.Name, r)
	control := watchKey{key: m.key("rollout", revKey(r.ID), "control")}
	switch {
	case d.Wait == WaitStopped:
		m.dequeue(ctx)
		d.RetryAfter = watchedRetry()
		m.watchFor(watchTarget{keys: []watchKey{control}, from: v.rev + 1})
		return d, false, nil
	case !d.Go && d.Wait != WaitSlot && d.Wait != WaitCanary: // held
		m.dequeue(ctx)
		d.RetryAfter = watchedRetry()
		m.watchFor(watchTarget{})
		return d, false, nil
	}
	if held && d.Go {
		// A newer revision supersedes the one this host holds a slot
		// for: the slot moves to it.
		won, err := m.take(ctx, v, r, slot, v.slotCreate[slot])
		if err != nil || !won {
			return Decision{Go: true}, false, err
		}
		m.watchFor(watchTarget{})
		return Decision{Go: true}, true, nil
	}
	if held { // it keeps the older revision's slot while it waits
		d.RetryAfter = watchedRetry()
		m.watchFor(watchTarget{keys: []watchKey{control, {key: m.key("slot") + "/", prefix: true}}, from: v.rev + 1})
		return d, false, nil
	}
	q, err := m.enqueue(ctx, r.ID)
	if err != nil {
		return Decision{}, false, err
	}
	free := v.free(r.Rollout, len(v.failures()))
	if !d.Go {
		free = nil
	}
	var pos int
	var pred string
	var queued bool
	err = m.call(ctx, func(ctx context.Context) error {
		var err error
		pos, pred, queued, err = m.place(ctx, q, max(len(free), 1))
		return err
	})
	if err != nil {
		return Decision{}, false, err
	}
	if !queued { // the slot lease was lost meanwhile: queue again
		m.mu.Lock()
		m.queued = 0
		m.mu.Unlock()
		return Decision{Go: true}, false, nil
	}
	if pos >= len(free) {
		if d.Go { // slots are free, for the hosts queued before it
			d = Decision{Why: fmt.Sprintf("waiting for a slot: queued behind %s", pred), Wait: WaitSlot}
		}
		d.RetryAfter = watchedRetry()
		t := watchTarget{keys: []watchKey{control, {key: m.key("queue", pred)}}, from: v.rev + 1}
		if pred == "" { // at the front: a freed slot, or a canary good, lets it go
			t.keys = []watchKey{control, {key: m.key("slot") + "/", prefix: true}, {key: m.key("rollout", revKey(r.ID), "canary") + "/", prefix: true}}
		}
		m.watchFor(t)
		return d, false, nil
	}
	won, err := m.take(ctx, v, r, free[pos], 0)
	if err != nil || !won {
		return Decision{Go: true}, false, err
	}
	m.watchFor(watchTarget{})
	return Decision{Go: true}, true, nil
}

// readAdmit reads, at one revision and in bytes that do not grow with
// the fleet, what admission decides on: the rollout's spec and control,
// its bad verdicts, how many are good, how many hosts are live, this
// host's hold, the slots taken (keys only) and the canary places.
func (c *Client) readAdmit(ctx context.Context, rev, me string) (*rolloutView, error) {
	base := c.key("rollout", revKey(rev))
	ops := []clientv3.Op{
		clientv3.OpGet(base + "/spec"),
		clientv3.OpGet(base + "/control"),
		clientv3.OpGet(base+"/bad/", clientv3.WithPrefix()),
		clientv3.OpGet(base+"/good/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(c.key("presence")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(c.key("hold", me)),
		clientv3.OpGet(c.key("slot")+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(c.key("transit")+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(base+"/canary/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
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
	c.parseRollout(v, rev, pairs(get(0), get(1), get(2)))
	v.goodN = int(get(3).Count)
	v.live = int(get(4).Count)
	c.parseSlots(v, pairs(get(5)))
	// Keys only (etcd reads them from its index: no lease, no value): a
	// key there is a slot taken, whoever wrote it.
	for _, kv := range pairs(get(6), get(7)) {
		v.slots[kv.key], v.slotCreate[kv.key] = true, kv.createRev
	}
	for _, kv := range get(8).Kvs {
		v.canary[string(kv.Key[len(base+"/canary/"):])] = true
	}
	v.folded = get(9).Count > 0
	return v, nil
}

// enqueue puts the host in the queue for r, once (its place is its key's
// create revision), and returns that place.
func (m *Member) enqueue(ctx context.Context, rev string) (int64, error) {
	m.mu.Lock()
	q, lease := m.queued, m.slotLease
	m.mu.Unlock()
	if q != 0 {
		return q, nil
	}
	if lease == 0 {
		return 0, ErrNotPresent
	}
	key := m.key("queue", m.host.Name)
	doc, _ := json.Marshal(slotDoc{Schema: Schema, Revision: rev, At: time.Now().UTC()})
	err := m.call(ctx, func(ctx context.Context) error {
		resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(doc), clientv3.WithLease(lease))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return err
		}
		q = resp.Header.Revision
		if !resp.Succeeded {
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				q = kvs[0].CreateRevision
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	m.queued = q
	m.mu.Unlock()
	return q, nil
}

// place reads the host's place in the queue: how many queued before it
// (counted up to limit), the one just before it ("" at the front), and
// whether its own key is still there.
func (m *Member) place(ctx context.Context, q int64, limit int) (int, string, bool, error) {
	prefix := m.key("queue") + "/"
	ahead := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(q - 1)}
	resp, err := m.cli.Txn(ctx).Then(
		clientv3.OpGet(m.key("queue", m.host.Name), clientv3.WithKeysOnly()),
		clientv3.OpGet(prefix, append(ahead, clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(int64(limit)))...),
		clientv3.OpGet(prefix, append(ahead, clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1))...),
	).Commit()
	if err != nil {
		return 0, "", false, err
	}
	mine := resp.Responses[0].GetResponseRange().Kvs
	if len(mine) == 0 || mine[0].CreateRevision != q {
		return 0, "", false, nil
	}
	pos := len(resp.Responses[1].GetResponseRange().Kvs)
	var pred string
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
		pred = string(kvs[0].Key[len(prefix):])
	}
	return pos, pred, true, nil
}

// queueIdle is how long a queued host may go without asking before it
// leaves the queue: a waiter asks again at least every watchedRetry, so
// one that stopped asking no longer waits (its deploy window closed, it
// was suspended or its revision superseded), and its place would hold
// up every host behind it.
const queueIdle = 45 * time.Second

// idle takes the host out of the queue once it stopped asking.
func (m *Member) idle(ctx context.Context) {
	defer m.wg.Done()
	for sleep(ctx, queueIdle/6) {
		m.mu.Lock()
		stale := m.queued != 0 && time.Since(m.askedAt) > queueIdle
		m.mu.Unlock()
		if stale {
			m.dequeue(ctx)
		}
	}
}

// dequeue takes the host out of the queue: it no longer waits for a slot
// (held, in maintenance, its rollout stopped), so it holds no one up.
func (m *Member) dequeue(ctx context.Context) {
	m.mu.Lock()
	q := m.queued
	m.mu.Unlock()
	if q == 0 {
		return
	}
	err := m.call(ctx, func(ctx context.Context) error {
		_, err := m.cli.Delete(ctx, m.key("queue", m.host.Name))
		return err
	})
	if err == nil {
		m.mu.Lock()
		m.queued = 0
		m.mu.Unlock()
	}
}

// take takes slot for r if it is free (created at 0), or still the one
// this host holds (created at created), and nothing else the decision
// read changed: the rollout's control and bad verdicts, the canary places
// while the canary runs, this host's hold. The host leaves the queue in
// the same transaction.
func (m *Member) take(ctx context.Context, v *rolloutView, r Revision, slot string, created int64) (bool, error) {
	m.mu.Lock()
	lease := m.slotLease
	m.mu.Unlock()
	if lease == 0 {
		return false, ErrNotPresent
	}
	after := v.rev + 1
	base := m.key("rollout", revKey(r.ID))
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(slot), "=", created),
		clientv3.Compare(clientv3.ModRevision(base+"/control"), "<", after),
		clientv3.Compare(clientv3.ModRevision(base+"/bad/"), "<", after).WithPrefix(),
		clientv3.Compare(clientv3.ModRevision(m.key("hold", m.host.Name)), "<", after),
		// Not folded meanwhile: a fold empties the rollout's keys, and a
		// compare on an emptied prefix passes.
		clientv3.Compare(clientv3.CreateRevision(m.summaryKey(r.ID)), "=", 0),
	}
	now := time.Now().UTC()
	doc, _ := json.Marshal(slotDoc{Schema: Schema, Host: m.host.Name, Revision: r.ID, At: now})
	ops := []clientv3.Op{
		clientv3.OpPut(slot, string(doc), clientv3.WithLease(lease)),
		clientv3.OpDelete(m.key("queue", m.host.Name)),
	}
	if v.goods() < r.Rollout.Canary {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(base+"/canary/"), "<", after).WithPrefix())
		ops = append(ops, clientv3.OpPut(base+"/canary/"+m.host.Name, "", clientv3.WithLease(lease)))
	}
	started := v.spec == nil && !v.specNewer // none yet, or one that does not pass: this host's
	if started {
		spec, _ := json.Marshal(specDoc{Schema: Schema, Revision: r.ID, Rollout: r.Rollout, By: m.host.Name, At: now})
		ops = append(ops, clientv3.OpPut(base+"/spec", string(spec)))
	}
	sops, s := m.statusOps(phase(r.ID, PhaseApplying))
	var won bool
	err := m.call(ctx, func(ctx context.Context) error {
		resp, err := m.cli.Txn(ctx).If(cmps...).Then(append(ops, sops...)...).Else(clientv3.OpGet(slot)).Commit()
		if err != nil {
			return err
		}
		won = resp.Succeeded
		if !won { // taken: by this host, when a slow etcd applied a try that timed out?
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 && kvs[0].Lease == int64(lease) {
				d, err := decode[slotDoc](kvs[0].Value)
				won = err == nil && d.Host == m.host.Name && d.Revision == r.ID && d.At.Equal(now)
			}
		}
		return nil
	})
	if err != nil || !won {
		return false, err
	}
	m.wrote(s)
	if started {
		m.foldSoon() // this host started a rollout: it folds what is over (gc.go)
	}
	m.mu.Lock()
	m.holding, m.slot, m.queued = r.ID, slot, 0
	m.quietUntil = time.Now().Add(r.Rollout.MinReady.Std() + 5*time.Second)
	if m.stall != nil {
		m.stall.Stop()
	}
	// Past its deadline the holder is stalled: it frees the slot itself,
	// so the rollout goes on without it.
	m.stall = time.AfterFunc(r.Rollout.ProgressDeadline.Std()+r.Rollout.MinReady.Std()+stallGrace, func() { m.stalled(r.ID, slot) })
	m.mu.Unlock()
	return true, nil
}

// stalled frees the slot of rev when the host still holds it past its
// deadline.
func (m *Member) stalled(rev, slot string) {
	m.mu.Lock()
	still := m.holding == rev && m.slot == slot
	m.mu.Unlock()
	if !still {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := m.call(ctx, func(ctx context.Context) error {
		_, err := m.cli.Txn(ctx).Then(clientv3.OpDelete(slot), clientv3.OpDelete(m.key("rollout", revKey(rev), "canary", m.host.Name))).Commit()
		return err
	})
	if err == nil {
		m.mu.Lock()
		if m.slot == slot {
			m.slot = ""
		}
		m.mu.Unlock()
	}
	m.log.Warn("fleet rollout slot held past the progress deadline: freed, so the rollout goes on without this host", "host", m.host.Name, "revision", rev, "error", err)
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
	holding, slot := m.holding, m.slot
	m.mu.Unlock()
	if holding == rev {
		ops = append(ops, clientv3.OpDelete(base+"/canary/"+m.host.Name))
		if slot != "" {
			ops = append(ops, clientv3.OpDelete(slot))
		}
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
		m.free()
	}
	m.quietUntil = time.Time{} // only now: the verdict carried the status
	m.mu.Unlock()
	return nil
}

// free forgets the slot held; m.mu is held.
func (m *Member) free() {
	m.holding, m.slot = "", ""
	if m.stall != nil {
		m.stall.Stop()
		m.stall = nil
	}
}

// Release gives the slot back without a verdict, and the host's place in
// the queue: the host stopped applying (suspended, or its revision was
// superseded by a newer one it may not apply yet).
func (m *Member) Release(ctx context.Context) error {
	m.mu.Lock()
	holding, slot, queued := m.holding, m.slot, m.queued
	m.mu.Unlock()
	if holding == "" && queued == 0 {
		return nil
	}
	var ops []clientv3.Op
	if slot != "" {
		ops = append(ops, clientv3.OpDelete(slot))
	}
	if holding != "" {
		ops = append(ops, clientv3.OpDelete(m.key("rollout", revKey(holding), "canary", m.host.Name)))
	}
	if queued != 0 {
		ops = append(ops, clientv3.OpDelete(m.key("queue", m.host.Name)))
	}
	err := m.call(ctx, func(ctx context.Context) error {
		_, err := m.cli.Txn(ctx).Then(ops...).Commit()
		return err
	})
	if err == nil {
		m.mu.Lock()
		m.free()
		m.queued, m.quietUntil = 0, time.Time{}
		m.want.RolloutPhase = ""
		m.mu.Unlock()
		m.wake()
	}
	return err
}
