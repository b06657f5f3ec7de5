package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Writer is the one writer of a state dir's snapshot: everyone else reads a
// view or asks it to change one. It takes the state lock for a burst of
// changes and lets go when the burst ends, saves in batches, reads the
// snapshot again when another cortex-sync wrote it meanwhile, and applies
// the backup retention.
type Writer struct {
	dir     state.Dir
	timeout time.Duration // how long to wait for another holder of the lock
	log     *slog.Logger
	// Reloaded is called, with the writer's lock held, after a snapshot
	// another cortex-sync saved was read again.
	Reloaded func(*state.Snapshot)
	// Lost is called, with the writer's lock held, when state.json was
	// found gone and this writer's snapshot saved again: the state dir
	// may have been removed.
	Lost func()
	// Busy reports whether more work is on its way, so a burst keeps the
	// lock (and saves at most every saveEvery) instead of saving per change.
	Busy func() bool

	mu   sync.Mutex // guards snap
	snap *state.Snapshot

	wmu     sync.Mutex // guards the state lock and what follows
	lock    *state.Lock
	held    bool // the lock is held for the writer's whole life (a sync)
	holders int
	dirty   bool
	stamp   state.Stamp // state.json as last loaded or saved here
	saved   time.Time
	linger  *time.Timer
	pruned  time.Time // when the retention last ran
}

// Bounds on holding the state lock through a burst.
const (
	saveEvery = time.Second
	lingerFor = 100 * time.Millisecond
)

// newWriter loads the snapshot. With hold, it first takes the lock and
// keeps it until Close: the snapshot it loads is the one it replaces.
func newWriter(ctx context.Context, dir state.Dir, timeout time.Duration, hold bool, log *slog.Logger) (*Writer, error) {
	w := &Writer{dir: dir, timeout: timeout, log: log}
	if hold {
		l, err := dir.Lock(ctx, timeout)
		if err != nil {
			return nil, err
		}
		w.lock, w.held = l, true
	}
	snap, err := dir.Load()
	if err != nil {
		w.Close()
		return nil, err
	}
	w.snap, w.stamp = snap, dir.Stamp()
	return w, nil
}

// Snapshot is the snapshot itself, for a caller that is the only one using
// the writer (a command); concurrent callers use View and Update.
func (w *Writer) Snapshot() *state.Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snap
}

// View is a copy of the snapshot to read while others change it: its own
// inventory slice (entries are replaced, never changed in place).
func (w *Writer) View() *state.Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snap.WithInventory(append([]*state.Entry(nil), w.snap.Inventory...))
}

// Update changes the snapshot under the writer's lock; it is saved with
// the next save.
func (w *Writer) Update(fn func(*state.Snapshot)) {
	w.mu.Lock()
	fn(w.snap)
	w.mu.Unlock()
	w.wmu.Lock()
	w.dirty = true
	w.wmu.Unlock()
}

// Acquire takes the state lock for a change, unless this writer holds it
// already. A snapshot another writer saved since is read again first.
func (w *Writer) Acquire(ctx context.Context) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.lock == nil {
		l, err := w.dir.Lock(ctx, w.timeout)
		if err != nil {
			return err
		}
		w.lock = l
	}
	// Checked even through a burst: a snapshot put back by hand takes no
	// lock.
	if err := w.foreign(); err != nil {
		if w.holders == 0 && !w.held {
			w.lock.Unlock()
			w.lock = nil
		}
		return err
	}
	w.holders++
	return nil
}

// foreign reads state.json again when someone else wrote it since this
// writer last read or saved it: another cortex-sync, or a hand that put a
// backup back. A damaged one is kept aside, never silently replaced, and
// this writer's snapshot saved in its place. Called with wmu held and the
// lock taken.
func (w *Writer) foreign() error {
	now := w.dir.Stamp()
	if now == w.stamp {
		return nil
	}
	if now == (state.Stamp{}) {
		// Gone, not replaced: the state dir (or state.json) removed under
		// a running cortex-sync. What it holds in memory is the truth, and
		// saved again; read as an empty snapshot it would forget what
		// cortex-sync created, and the source it came from.
		w.stamp, w.dirty = state.Stamp{}, true
		if w.Lost != nil {
			w.Lost() // says so, with what else it makes again
		} else {
			w.log.Error("state.json was removed under a running cortex-sync: the snapshot it holds in memory is saved again",
				"state_dir", w.dir.Path(), "resources", len(w.snap.Inventory))
		}
		return w.save()
	}
	err := w.reload()
	if !errors.Is(err, state.ErrCorruptSnapshot) {
		return err
	}
	aside, aerr := w.dir.SetAside()
	if aerr != nil {
		return fmt.Errorf("%w; and keeping it aside failed: %v", err, aerr)
	}
	w.log.Error("state.json was damaged under a running cortex-sync: kept aside, and the snapshot it holds in memory saved in its place",
		"damaged", aside, "error", err)
	w.stamp, w.dirty = state.Stamp{}, true
	return w.save()
}

// Check reads state.json again when another writer saved it, and saves
// this writer's snapshot again when it is gone: a stat when nothing
// changed. A writer that only reads from time to time (an idle agent)
// calls it, so that neither waits for its next change.
func (w *Writer) Check(ctx context.Context) error {
	w.wmu.Lock()
	stamp := w.stamp
	w.wmu.Unlock()
	if w.dir.Stamp() == stamp {
		return nil
	}
	if err := w.Acquire(ctx); err != nil {
		return err
	}
	w.Release()
	return nil
}

// Release ends a change. The last one out saves and lets go of the lock,
// unless more work is on its way: then the lock is kept for lingerFor and
// the snapshot saved at most every saveEvery, so a burst of a thousand
// changes is not a thousand saves.
func (w *Writer) Release() {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.holders--
	if w.holders > 0 || w.held {
		return
	}
	if w.Busy != nil && w.Busy() {
		if time.Since(w.saved) > saveEvery {
			w.saveLocked()
		}
		if w.linger == nil {
			w.linger = time.AfterFunc(lingerFor, w.letGo)
		} else {
			w.linger.Reset(lingerFor)
		}
		return
	}
	w.unlock()
}

// Idle reports whether no change is under way and the lock is not held
// through a burst.
func (w *Writer) Idle() bool {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return w.holders == 0 && (w.lock == nil || w.held)
}

// letGo unlocks a lingering lock no change took up again.
func (w *Writer) letGo() {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.holders == 0 && w.lock != nil && !w.held {
		w.unlock()
	}
}

// unlock saves and lets go of the state lock. Called with wmu held.
func (w *Writer) unlock() {
	w.saveLocked()
	w.lock.Unlock()
	w.lock = nil
}

// Save writes the snapshot now if it changed: between the groups of a
// sync, and before a creation it names. The lock must be held (Acquire).
func (w *Writer) Save() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return w.save()
}

// saveLocked saves, logging a failure: the next save tries again.
func (w *Writer) saveLocked() {
	if err := w.save(); err != nil {
		w.log.Error("save snapshot", "error", err)
	}
}

// save writes the snapshot if it changed. Called with wmu held and the
// state lock taken.
func (w *Writer) save() error {
	if !w.dirty {
		return nil
	}
	if w.stamp != (state.Stamp{}) && w.dir.Stamp() != w.stamp {
		// Written by someone else since: theirs is read, ours is not
		// laid over it blindly.
		return w.foreign()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.dir.Save(w.snap); err != nil {
		return err
	}
	w.dirty, w.stamp, w.saved = false, w.dir.Stamp(), time.Now()
	return nil
}

// Flush saves what is unsaved, taking the lock if need be: at the end of
// a reconcile, and at shutdown.
func (w *Writer) Flush(ctx context.Context) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	switch {
	case w.holders > 0:
		return nil // the burst saves when it ends
	case w.lock != nil && w.held:
		return w.save()
	case w.lock != nil: // held on through a burst
		if w.linger != nil {
			w.linger.Stop()
		}
		w.unlock()
		return nil
	case !w.dirty:
		return nil
	}
	l, err := w.dir.Lock(ctx, w.timeout)
	if err != nil {
		return err
	}
	defer l.Unlock()
	return w.save()
}

// reload reads a snapshot another writer saved. Called with wmu held and
// the lock taken.
func (w *Writer) reload() error {
	snap, err := w.dir.Load()
	if err != nil {
		return err
	}
	w.mu.Lock()
	snap.Root = w.snap.Root
	w.snap = snap
	w.mu.Unlock()
	w.stamp = w.dir.Stamp()
	w.log.Info("snapshot written by another cortex-sync; re-planning", "serial", snap.Serial)
	if w.Reloaded != nil {
		w.Reloaded(snap)
	}
	return nil
}

// Retain applies the backup retention, at most once every every, with the
// lock: held already, or taken only if free at once (the next call tries
// again), and never through a burst.
func (w *Writer) Retain(r state.Retention, every time.Duration) {
	if r.MaxAge <= 0 {
		return
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.holders > 0 || (w.lock != nil && !w.held) || time.Since(w.pruned) < every {
		return
	}
	if !w.held {
		l, err := w.dir.Lock(context.Background(), 0)
		if err != nil {
			return
		}
		defer l.Unlock()
	}
	w.pruned = time.Now()
	gone, err := w.dir.PruneBackups(r, w.pruned)
	for _, run := range gone {
		w.log.Info("backup run deleted", "run", run.Name, "files", run.Files, "bytes", run.Bytes)
	}
	if err != nil {
		w.log.Warn("backup retention", "error", err)
	}
}

// AcceptRollback trusts a rolled-back snapshot from now on (the user said
// so), and saves it.
func (w *Writer) AcceptRollback() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.mu.Lock()
	w.dir.AcceptRollback(w.snap)
	w.mu.Unlock()
	w.dirty = true
	return w.save()
}

// Close saves what is unsaved and lets go of the lock.
func (w *Writer) Close() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.linger != nil {
		w.linger.Stop()
	}
	if w.lock == nil {
		return nil
	}
	err := error(nil)
	if w.snap != nil {
		err = w.save()
	}
	w.lock.Unlock()
	w.lock = nil
	return err
}
