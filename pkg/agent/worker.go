package agent

import (
	"context"
	"os"
	"slices"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// waitAgain is how soon a key waiting on a dependency is looked at again.
const waitAgain = 250 * time.Millisecond

// work takes one key off the queue and reconciles it; false once the queue
// shut down. Once ctx ends, what is still queued is left for the next
// start, which re-plans everything.
func (a *Agent) work(ctx context.Context) bool {
	id, shutdown := a.queue.Get()
	if shutdown {
		return false
	}
	a.inflight.Add(1)
	defer a.settle()
	defer a.inflight.Add(-1)
	defer a.queue.Done(id)
	if ctx.Err() != nil {
		return true
	}
	switch err := a.reconcile(ctx, id); {
	case err != nil:
		a.queue.AddRateLimited(id) // transient: again, later and later
	default:
		a.queue.Forget(id)
	}
	a.passed(id)
	return true
}

// passed notes that id was reconciled once (applied, failed or found
// waiting): the first reconcile is done once every key of the first
// revision was, so a key that keeps coming back (a command retried, a
// host that keeps drifting) cannot hold readiness hostage. Ready means
// watched too: what the first pass made (new directories included) is
// watched before the agent says it is ready, or an edit made just after
// would go unseen until the drift scan.
func (a *Agent) passed(id resource.ID) {
	a.mu.Lock()
	if a.firstPass == nil {
		a.mu.Unlock()
		return
	}
	delete(a.firstPass, id)
	if len(a.firstPass) > 0 {
		a.mu.Unlock()
		return
	}
	a.firstPass = nil
	w, d := a.watch, a.desired
	a.rewatch = false
	a.mu.Unlock()
	if w != nil && d != nil {
		w.sync(d.Set)
	}
	a.mu.Lock()
	a.started = true
	a.mu.Unlock()
}

// reconcile converges one resource: it re-reads the desired and the live
// state (a queued key is only a hint), decides, and acts. It returns an
// error only for what may pass by itself (an apply that failed); what
// cannot (an invalid spec) is reported and waits for the desired state to
// change.
func (a *Agent) reconcile(ctx context.Context, id resource.ID) error {
	c, d := a.observe(ctx, id)
	if d == nil || c == nil {
		return nil
	}
	log := a.log.With("resource", id, "revision", d.Revision())
	switch {
	case c.Err != nil:
		a.note(0, 1)
		log.Error("cannot observe", "error", c.Err)
		return nil
	case !due(c):
		log.Debug("in sync")
		a.unhint(id)
		return nil
	}
	a.seen(id, d.Revision())
	drift := c.IsDrift()
	if drift {
		a.opts.Metrics.DriftDetected(c.Kind)
	}
	a.mu.Lock()
	suspended, hold := a.suspended, a.pruneHold
	if rb := a.sess.Snapshot.Rollback(); rb != nil && hold == "" {
		hold = rb.Error() // until the user accepts it (state accept-rollback)
	}
	a.mu.Unlock()
	switch {
	case suspended:
		return nil // observed and reported, never changed
	case drift && !a.opts.SelfHeal:
		log.Info("drift detected, not healing (selfHeal: false)", "action", c.Action, "reason", c.Reason)
		return nil
	case c.Prune && (!a.opts.Prune || hold != ""):
		return nil
	}
	if wait := a.waiting(ctx, d, c); wait != "" {
		log.Debug("waiting", "for", wait)
		a.queue.AddAfter(id, waitAgain)
		return nil
	}
	if drift {
		if f := a.fight.Status(string(id)); f.Fighting && time.Now().Before(f.NotBefore) {
			a.queue.AddAfter(id, time.Until(f.NotBefore))
			return nil
		}
	}

	if err := a.acquire(ctx); err != nil {
		log.Warn("state lock", "error", err)
		return err
	}
	defer a.release()
	if c, d = a.observe(ctx, id); c == nil || !due(c) || c.Err != nil {
		return nil // changed while the lock was taken
	}
	if creates(c) {
		if err := a.intend(ctx, d, c); err != nil {
			log.Error("cannot record what is about to be created", "error", err)
			return err
		}
	}
	a.mu.Lock()
	env := a.env(d)
	a.mu.Unlock()
	// An apply begun is finished even when the agent is told to stop: a
	// mirror cut short would leave the host half updated until the next
	// start.
	entry, err := driver.Host{Env: env}.Apply(context.WithoutCancel(ctx), c)
	a.mu.Lock()
	res := apply.Record(a.sess.Snapshot, d.Set, c, entry, err)
	noteAttempt(a.sess.Snapshot, d.Revision(), res)
	settled(a.sess.Snapshot, c.ID)
	a.mu.Unlock()
	a.markDirty()
	if c.Action == diff.NoOp {
		if err != nil {
			log.Error("cannot record", "error", res.Error)
			return err
		}
		log.Info("recorded: found on the host as desired", "created_by_us", entry != nil && entry.Created)
		return nil
	}

	result := ResultSuccess
	if err != nil {
		result = ResultFailure
	}
	a.opts.Metrics.ObserveApply(c.Kind, string(c.Action), result)
	kind := "intentional"
	if drift {
		kind = "corrective"
	}
	if err != nil {
		a.note(1, 1)
		log.Error("apply failed", "action", c.Action, "reason", c.Reason, "change", kind, "error", res.Error)
		return err
	}
	a.note(1, 0)
	if c.Action == diff.Create || c.Kind == "Directory" {
		a.mu.Lock()
		a.rewatch = true // new directories to watch
		a.mu.Unlock()
	}
	log.Info("applied", "action", c.Action, "reason", c.Reason, "change", kind)
	if drift {
		a.opts.Metrics.DriftCorrected(c.Kind)
		if f := a.fight.Record(string(id)); f.Fighting {
			log.Warn("fighting: something keeps undoing this resource", "corrections", f.Corrections, "backoff", f.Backoff)
		}
	}
	if c.Kind == "Process" && c.Action == diff.Restart {
		reason := RestartSpecChange
		if c.Reason == diff.Crashed {
			reason = RestartCrash
		}
		a.opts.Metrics.ProcessRestarted(reason)
	}
	return nil
}

// due reports whether c needs the state lock: a pending change, or a
// resource found on the host as desired whose record is missing or out of
// date (there before; or made, or mirrored, by an agent killed before it
// recorded it). That one is applied as the no-op it is, as every sync does,
// which records it: it enters the inventory (as created when its creation
// was intended), its recorded spec is the one applied, a tree index holds
// every file cortex-sync wrote.
func due(c *diff.Change) bool {
	if c.Pending() {
		return true
	}
	o := &c.Observed
	return c.Err == nil && !c.Suspended && c.Desired != nil && o.Desired && (c.Record == nil || o.GitChanged || o.Stale)
}

// creates reports whether applying c makes something new on the host.
func creates(c *diff.Change) bool {
	return c.Pending() && c.Desired != nil && c.Record == nil && !c.Observed.Exists
}

// intend names c in the snapshot's creations and saves it before the host
// is touched, as a sync does for each group: an agent killed between a
// creation and its record must not forget it made the thing (prune would
// never delete it). With c go all the creations the revision still owes,
// found by one plan, so a burst of them costs one save, not one each.
// Called holding the state lock.
func (a *Agent) intend(ctx context.Context, d *reconcile.Desired, c *diff.Change) error {
	a.mu.Lock()
	if a.sess.Snapshot.Intended(string(c.ID), c.Path) {
		a.mu.Unlock()
		return nil
	}
	env := a.env(d)
	snap := a.sess.Snapshot.WithInventory(append([]*state.Entry(nil), a.sess.Snapshot.Inventory...))
	a.mu.Unlock()
	creating := []state.Creation{{ID: string(c.ID), Path: c.Path}}
	for _, o := range diff.Make(ctx, driver.Host{Env: env}, d.Set, snap, a.opts.Engine.Concurrency).Changes {
		if creates(o) && o.ID != c.ID {
			creating = append(creating, state.Creation{ID: string(o.ID), Path: o.Path})
		}
	}
	a.mu.Lock()
	added := a.sess.Snapshot.Intend(creating)
	a.mu.Unlock()
	if !added {
		return nil
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.dirty = true
	return a.save()
}

// settled drops id's creation once its record is in the inventory. (The
// snapshot's Settle judges every creation, too slow for one key at a time;
// refresh calls it once a revision.)
func settled(snap *state.Snapshot, id resource.ID) {
	if len(snap.Creating) == 0 || snap.Find(string(id)) == nil {
		return
	}
	snap.Creating = slices.DeleteFunc(slices.Clone(snap.Creating), func(k state.Creation) bool { return k.ID == string(id) })
	if len(snap.Creating) == 0 {
		snap.Creating = nil
	}
}

// noteAttempt keeps the snapshot's last attempt current with one outcome:
// a failure is listed (shown by status even for a resource never applied),
// a success takes it off.
// The attempt is replaced, never changed in place: a status view copied
// the snapshot under mu and reads the old one after letting go of it.
func noteAttempt(snap *state.Snapshot, revision string, res *apply.Result) {
	a := &state.Attempt{Revision: revision}
	if old := snap.LastAttempt; old != nil && old.Revision == revision {
		a.Failed = slices.DeleteFunc(slices.Clone(old.Failed), func(f state.Failure) bool { return f.ID == string(res.ID) })
	}
	a.Time = time.Now().UTC().Truncate(time.Millisecond)
	if res.Outcome == apply.Failed {
		a.Failed = append(a.Failed, state.Failure{ID: string(res.ID), Kind: res.Kind, Path: res.Path, Action: string(res.Action), Error: res.Error})
	}
	snap.LastAttempt = a
}

// observe reads the current desired state and record of id and looks at
// the host.
func (a *Agent) observe(ctx context.Context, id resource.ID) (*diff.Change, *reconcile.Desired) {
	a.mu.Lock()
	d := a.desired
	if d == nil {
		a.mu.Unlock()
		return nil, nil
	}
	env := a.env(d)
	rec := a.sess.Snapshot.Find(string(id))
	a.mu.Unlock()
	r := d.Set.Get(id)
	if r == nil && rec == nil {
		return nil, nil // gone from both: nothing to do
	}
	return diff.One(ctx, driver.Host{Env: env}, r, rec), d
}

// waiting names what id must wait for before it is applied: a dependency
// not applied or not healthy yet; for a prune, a dependent still there.
func (a *Agent) waiting(ctx context.Context, d *reconcile.Desired, c *diff.Change) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	snap := a.sess.Snapshot
	if c.Desired == nil {
		for _, e := range snap.Inventory {
			if slices.Contains(e.DependsOn, string(c.ID)) && d.Set.Get(resource.ID(e.ID)) == nil && !e.NoPrune {
				return e.ID + " (it depends on this, and goes first)"
			}
		}
		return ""
	}
	host := driver.Host{Env: a.env(d)}
	for _, dep := range d.Set.Deps(c.ID) {
		rec := snap.Find(string(dep))
		switch {
		case rec == nil:
			return string(dep) + " (not applied yet)"
		case rec.Result != nil && rec.Result.Error != "":
			return string(dep) + " (its last apply failed)"
		}
		if r, ok := host.Ready(ctx, rec); ok && r.Health != health.Healthy {
			return string(dep) + " (" + string(r.Health) + ")"
		}
	}
	return ""
}

// acquire takes the state lock for a burst of applies: the first key in
// takes it, the last one out saves and lets go, so a manual sync waits
// for a burst and never writes in the middle of one. A snapshot another
// writer saved since is read again, and everything is re-planned.
func (a *Agent) acquire(ctx context.Context) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if a.lock == nil {
		a.mu.Lock()
		st := a.sess.State
		a.mu.Unlock()
		l, err := st.Lock(ctx, a.opts.Engine.LockTimeout)
		if err != nil {
			return err
		}
		a.lock = l
		if now := snapshotStamp(st); now != a.stamp {
			if err := a.reload(); err != nil {
				a.lock.Unlock()
				a.lock = nil
				return err
			}
		}
	}
	a.holders++
	return nil
}

// release lets go of a burst. While keys are queued the lock is kept and
// the snapshot saved at most every saveEvery, so a burst of a thousand
// files is not a thousand saves; once the queue is empty (or nothing came
// for lingerFor) the snapshot is saved and the lock let go.
func (a *Agent) release() {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.holders--
	if a.holders > 0 {
		return
	}
	if a.queue.Len() > 0 {
		if time.Since(a.saved) > saveEvery {
			if err := a.save(); err != nil {
				a.log.Error("save snapshot", "error", err)
			}
		}
		if a.linger == nil {
			a.linger = time.AfterFunc(lingerFor, a.letGo)
		} else {
			a.linger.Reset(lingerFor)
		}
		return
	}
	a.unlock()
}

// Bounds on holding the state lock through a burst.
const (
	saveEvery = time.Second
	lingerFor = 100 * time.Millisecond
)

// letGo unlocks a lingering lock no key took up again.
func (a *Agent) letGo() {
	a.wmu.Lock()
	if a.holders == 0 && a.lock != nil {
		a.unlock()
	}
	a.wmu.Unlock()
	a.settle()
}

// unlock saves, lets go of the state lock, and closes retired revisions.
// Called with wmu held and no holder left.
func (a *Agent) unlock() {
	if err := a.save(); err != nil {
		a.log.Error("save snapshot", "error", err)
	}
	a.lock.Unlock()
	a.lock = nil
	a.mu.Lock()
	for _, d := range a.retired {
		d.Close()
	}
	a.retired = nil
	a.mu.Unlock()
}

func (a *Agent) markDirty() {
	a.wmu.Lock()
	a.dirty = true
	a.wmu.Unlock()
}

// save writes the snapshot if it changed. Called with wmu held and the
// state lock taken.
func (a *Agent) save() error {
	if !a.dirty {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.sess.State.Save(a.sess.Snapshot); err != nil {
		return err
	}
	a.dirty, a.stamp, a.saved = false, snapshotStamp(a.sess.State), time.Now()
	return nil
}

// flush saves what is unsaved, taking the lock if need be: at shutdown.
func (a *Agent) flush() error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	switch {
	case a.holders > 0:
		return nil // the burst saves when it ends
	case a.lock != nil: // held on through a burst
		if a.linger != nil {
			a.linger.Stop()
		}
		a.unlock()
		return nil
	}
	if !a.dirty {
		return nil
	}
	l, err := a.sess.State.Lock(context.Background(), a.opts.Engine.LockTimeout)
	if err != nil {
		return err
	}
	defer l.Unlock()
	return a.save()
}

// retentionEvery bounds how often the agent applies the backup retention:
// backups come only from overwriting what cortex-sync had not written, so
// they grow slowly, and a drifting host converges many times an hour.
const retentionEvery = time.Hour

// pruneBackups applies the backup retention, as a sync does after it
// succeeded: under the state lock, taken only if free at once (the next
// converged reconcile tries again) and never through a burst.
func (a *Agent) pruneBackups() {
	if a.opts.Retention.MaxAge <= 0 {
		return
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if a.holders > 0 || a.lock != nil || time.Since(a.pruned) < retentionEvery {
		return
	}
	a.mu.Lock()
	st := a.sess.State
	a.mu.Unlock()
	l, err := st.Lock(context.Background(), 0)
	if err != nil {
		return
	}
	defer l.Unlock()
	a.pruned = time.Now()
	gone, err := st.PruneBackups(a.opts.Retention, a.pruned)
	for _, run := range gone {
		a.log.Info("backup run deleted", "run", run.Name, "files", run.Files, "bytes", run.Bytes)
	}
	if err != nil {
		a.log.Warn("backup retention", "error", err)
	}
}

// reload reads a snapshot another writer (a manual sync) saved, and queues
// every key to re-plan against it. Called with wmu held and the lock taken.
func (a *Agent) reload() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	snap, err := a.sess.State.Load()
	if err != nil {
		return err
	}
	snap.Root = a.sess.Snapshot.Root
	a.sess.Snapshot, a.sess.Env.Snapshot = snap, snap
	a.stamp = snapshotStamp(a.sess.State)
	a.log.Info("snapshot written by another cortex-sync; re-planning", "serial", snap.Serial)
	if d := a.desired; d != nil {
		for _, r := range d.Set.Resources() {
			a.queue.Add(r.ID())
		}
	}
	for _, e := range snap.Inventory {
		a.queue.Add(resource.ID(e.ID))
	}
	return nil
}

// snapshotStamp is state.json's stamp: a write by anyone changes it.
func snapshotStamp(d state.Dir) fileStamp {
	fi, err := os.Stat(d.File("state.json").Path())
	if err != nil {
		return fileStamp{}
	}
	return stampOf(fi)
}
