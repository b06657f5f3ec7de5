package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// settleDelay lets a burst of events (an editor's write, rename and chmod)
// arrive before the key is looked at; the queue folds repeats into one.
const settleDelay = 20 * time.Millisecond

// watcher turns host events into queued keys: inotify watches on the
// directories that hold managed paths (directories, not files: editors
// replace files by rename), every directory of a mirrored tree, and the
// supervisors' status files, plus a pidfd on each supervisor. What to
// watch, and for which key, is the engine's (reconcile.Watches): the
// watcher knows no kind.
type watcher struct {
	keys keySink
	log  *slog.Logger
	// restarted counts a restart a supervisor made on its own, by reason.
	restarted func(reason RestartReason)
	// tell tells what a supervisor reported on its own (events.go); nil
	// tells nothing.
	tell func(events.Event)
	fs   *fsnotify.Watcher
	// procs is where supervisors write their status; procsDir, its door.
	procs    string
	procsDir state.Dir

	stop, stopped *os.File // a pipe: closing its write end ends every pidfd wait

	// add adds one inotify watch: fsnotify's; a test's stand-in refuses
	// as a kernel out of watches does.
	add func(dir string) error
	// counted hears how many directories are watched and how many are
	// not for want of watches, whenever that changes.
	counted func(WatchCount)
	// retryBase and retryMax bound the backoff of the retry of unwatched
	// directories (defaults watchRetryBase, watchRetryMax).
	retryBase, retryMax time.Duration

	mu     sync.Mutex
	dirs   map[string][]resource.ID        // host directory to watch → interested keys
	paths  map[string]resource.ID          // managed host path → its key
	trees  map[string]resource.ID          // host directory inside a mirror → its Directory
	files  map[string]resource.ID          // state file → its key
	tops   map[resource.ID]string          // a mirror's key → its top on the host
	shims  map[resource.ID]int             // key → supervisor pid watched
	runs   map[resource.ID]int             // key → restarts its supervisor reported
	ran    map[resource.ID]supervise.State // key → the state its supervisor reported last
	failed map[resource.ID]bool            // keys told failed, until told running again
	// unwatched are the directories of dirs whose watch the kernel
	// refused for want of watches (ENOSPC, EMFILE): not watched, retried
	// with backoff and at once when a watch frees; the drift scan covers
	// them meanwhile.
	unwatched map[string]struct{}
	// absent are the directories of dirs the kernel did not watch for
	// another reason (gone, most likely: the watch of its parent sees it
	// come back, and the engine has it watched then).
	absent   map[string]struct{}
	outSince time.Time     // since when some are unwatched; zero when none
	outErr   string        // the kernel's refusal, for the report
	retryIn  time.Duration // the next retry's backoff
	retry    *time.Timer   // the next retry; nil when none is due
	closed   bool
	told     WatchCount // what counted heard last
}

// WatchCount is how many directories the agent watches for drift, and how
// many it cannot for want of inotify watches (fs.inotify.max_user_watches).
type WatchCount struct {
	Watched   int
	Unwatched int
	Since     time.Time // since when some are unwatched
	Err       string    // the kernel's refusal
}

// The retry of unwatched directories: after watchRetryBase, doubling to
// watchRetryMax, each ±20%; at once when one of the agent's watches frees.
// A raised fs.inotify.max_user_watches, or watches another program gave
// back, cannot be observed: the retry finds them.
const (
	watchRetryBase = time.Second
	watchRetryMax  = time.Minute
)

// outOfWatches says whether err is the kernel refusing a watch for want
// of watches (max_user_watches) or of instances.
func outOfWatches(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EMFILE)
}

// keySink is the key loop as the watcher sees it: where what it saw goes.
// The watcher knows no Agent.
type keySink interface {
	// hint queues a key to be looked at after a settle delay.
	hint(id resource.ID, t Trigger, after time.Duration)
	// narrow says only the tree entry rel of a key changed; widen, all of
	// it did.
	narrow(id resource.ID, rel string)
	widen(id resource.ID)
	// rewatchOf has the keys' watches follow a parent that came to be.
	rewatchOf(ids ...resource.ID)
	// stateGone says the state dir's procs went (the state dir removed).
	stateGone()
}

func newWatcher(keys keySink, procsDir state.Dir, log *slog.Logger, restarted func(reason RestartReason)) (*watcher, error) {
	f, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	stopped, stop, err := os.Pipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	procs, _ := filepath.Abs(procsDir.Path())
	w := &watcher{keys: keys, log: log, restarted: restarted, fs: f, stop: stop, stopped: stopped, procs: procs, procsDir: procsDir,
		dirs: map[string][]resource.ID{}, paths: map[string]resource.ID{}, trees: map[string]resource.ID{},
		files: map[string]resource.ID{}, shims: map[resource.ID]int{}, runs: map[resource.ID]int{}, ran: map[resource.ID]supervise.State{}, failed: map[resource.ID]bool{},
		unwatched: map[string]struct{}{}, absent: map[string]struct{}{}, retryBase: watchRetryBase, retryMax: watchRetryMax, counted: func(WatchCount) {}}
	w.add = f.Add
	w.watchProcs()
	return w, nil
}

// watchProcs watches the directory supervisors write their status in,
// making it if need be (through the state dir's door).
func (w *watcher) watchProcs() {
	if h, err := w.procsDir.Open(true); err == nil {
		h.Close()
		w.fs.Add(w.procs)
	}
}

func (w *watcher) close() {
	w.mu.Lock()
	w.closed = true
	if w.retry != nil {
		w.retry.Stop()
	}
	w.mu.Unlock()
	w.fs.Close()
	w.stop.Close() // every await returns; the read end stays open for them
}

// sync watches what the engine says, and nothing else.
func (w *watcher) sync(ws reconcile.Watches) {
	w.mu.Lock()
	defer w.mu.Unlock()
	freed := false
	for dir := range w.dirs {
		if _, ok := ws.Dirs[dir]; !ok {
			freed = w.unwatch(dir) || freed
		}
	}
	for dir := range ws.Dirs {
		if _, ok := w.dirs[dir]; !ok {
			w.watch(dir)
		}
	}
	w.dirs, w.paths, w.trees, w.files, w.tops = ws.Dirs, ws.Paths, ws.Trees, ws.Files, ws.Tops
	if freed {
		w.retryNow()
	}
	w.count()
	w.watchShims()
}

// unwatch removes dir's watch, and says whether that freed one. Called
// with mu held.
func (w *watcher) unwatch(dir string) bool {
	_, out := w.unwatched[dir]
	_, gone := w.absent[dir]
	delete(w.unwatched, dir)
	delete(w.absent, dir)
	if out || gone {
		return false
	}
	return w.fs.Remove(dir) == nil
}

// update watches what the engine says for these keys (ws: their watches
// alone), and leaves every other key's watches as they are.
func (w *watcher) update(ids []resource.ID, ws reconcile.Watches) {
	if len(ids) == 0 {
		return
	}
	gone := make(map[resource.ID]bool, len(ids))
	for _, id := range ids {
		gone[id] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	freed := false
	for dir, keys := range w.dirs {
		kept := slices.DeleteFunc(keys, func(id resource.ID) bool { return gone[id] })
		if len(kept) > 0 {
			w.dirs[dir] = kept
			continue
		}
		delete(w.dirs, dir)
		if _, ok := ws.Dirs[dir]; !ok {
			freed = w.unwatch(dir) || freed
		}
	}
	for _, m := range []map[string]resource.ID{w.paths, w.trees, w.files} {
		maps.DeleteFunc(m, func(_ string, id resource.ID) bool { return gone[id] })
	}
	for id := range gone {
		delete(w.tops, id)
	}
	for dir, keys := range ws.Dirs {
		if _, ok := w.dirs[dir]; !ok {
			w.watch(dir)
		}
		w.dirs[dir] = append(w.dirs[dir], keys...)
	}
	maps.Copy(w.paths, ws.Paths)
	maps.Copy(w.trees, ws.Trees)
	maps.Copy(w.files, ws.Files)
	maps.Copy(w.tops, ws.Tops)
	if freed {
		w.retryNow()
	}
	w.count()
	w.watchShims()
}

// watchTree watches a directory made inside id's mirrored tree, and every
// directory below it: made with its contents (mkdir -p, a rename into
// place), they were there before its watch was. Called with mu held.
func (w *watcher) watchTree(dir string, id resource.ID) {
	w.trees[dir] = id
	w.dirs[dir] = append(w.dirs[dir], id)
	w.watch(dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			w.watchTree(filepath.Join(dir, e.Name()), id)
		}
	}
}

// watch adds one inotify watch. When the kernel has none left, dir is
// unwatched: counted, reported, retried, and covered by the drift scan
// meanwhile. Called with mu held.
func (w *watcher) watch(dir string) {
	err := w.add(dir)
	delete(w.absent, dir)
	switch {
	case err == nil:
		delete(w.unwatched, dir)
	case outOfWatches(err):
		w.unwatched[dir] = struct{}{}
		if w.outSince.IsZero() {
			w.outSince, w.outErr = time.Now().UTC().Truncate(time.Second), err.Error()
			w.log.Warn("out of inotify watches: directories go unwatched, the drift scan covers them, and their watches are retried (raise fs.inotify.max_user_watches)", "dir", dir, "error", err)
		}
		w.retryLater()
	default:
		delete(w.unwatched, dir)
		w.absent[dir] = struct{}{}
	}
}

// retryLater arms the retry of the unwatched directories, if none is
// armed. Called with mu held.
func (w *watcher) retryLater() {
	if w.retry != nil || w.closed {
		return
	}
	if w.retryIn <= 0 {
		w.retryIn = w.retryBase
	}
	d := time.Duration(float64(w.retryIn) * (0.8 + 0.4*rand.Float64()))
	w.retryIn = min(2*w.retryIn, w.retryMax)
	w.retry = time.AfterFunc(d, func() {
		w.mu.Lock()
		w.retry = nil
		w.retryNow()
		w.count()
		w.mu.Unlock()
	})
}

// retryNow watches the unwatched directories while the kernel lets it:
// the first refusal ends the round (the rest would be refused too) and
// arms the next. Called with mu held.
func (w *watcher) retryNow() {
	if w.closed || len(w.unwatched) == 0 {
		return
	}
	for dir := range w.unwatched {
		if _, ok := w.dirs[dir]; !ok {
			delete(w.unwatched, dir)
			continue
		}
		w.watch(dir)
		if _, still := w.unwatched[dir]; still {
			return // watch armed the next retry
		}
		if id, ok := w.trees[dir]; ok {
			// Directories made inside it while it was unwatched went unseen.
			w.watchNew(dir, id)
		}
	}
}

// watchNew watches the directories below dir, a directory of id's mirror,
// that are not watched yet. Called with mu held.
func (w *watcher) watchNew(dir string, id resource.ID) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		sub := filepath.Join(dir, e.Name())
		if _, ok := w.dirs[sub]; e.IsDir() && !ok {
			w.watchTree(sub, id)
		}
	}
}

// count tells how many directories are watched, when that changed, and
// ends the episode once none is unwatched. Called with mu held.
func (w *watcher) count() {
	if len(w.unwatched) == 0 && !w.outSince.IsZero() {
		w.log.Info("every directory is watched again", "unwatched_for", time.Since(w.outSince).Round(time.Second))
		w.outSince, w.outErr, w.retryIn = time.Time{}, "", 0
		if w.retry != nil {
			w.retry.Stop()
			w.retry = nil
		}
	}
	c := WatchCount{Watched: len(w.dirs) - len(w.unwatched) - len(w.absent), Unwatched: len(w.unwatched), Since: w.outSince, Err: w.outErr}
	if c != w.told {
		w.told = c
		w.counted(c)
	}
}

// watches is how many directories are watched, and how many not.
func (w *watcher) watches() WatchCount {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.told
}

// run turns events into keys until ctx ends.
func (w *watcher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			w.log.Warn("watch", "error", err)
		case ev, ok := <-w.fs.Events:
			if !ok {
				return
			}
			w.event(ev)
		}
	}
}

func (w *watcher) event(ev fsnotify.Event) {
	if ev.Name == w.procs && ev.Has(fsnotify.Remove) {
		w.keys.stateGone() // the state dir removed, most likely
		return
	}
	dir := filepath.Dir(ev.Name)
	if dir == w.procs {
		w.mu.Lock()
		id, ok := w.files[ev.Name]
		if ok {
			w.countRestarts(id, ev.Name)
			w.watchShims()
		}
		w.mu.Unlock()
		if ok {
			w.keys.hint(id, TriggerProcessExit, settleDelay)
		}
		return
	}
	if reconcile.IsTemp(filepath.Base(ev.Name)) {
		return // cortex-sync's own write in progress
	}
	w.mu.Lock()
	// A managed path itself, or an entry of a mirrored tree: only its key,
	// and for a tree, only the entry.
	var ids []resource.ID
	if id, ok := w.paths[ev.Name]; ok {
		ids = append(ids, id)
		w.keys.widen(id)
	}
	if id, ok := w.trees[dir]; ok {
		ids = append(ids, id)
		if rel, err := filepath.Rel(w.tops[id], ev.Name); err == nil && !strings.HasPrefix(rel, "..") {
			w.keys.narrow(id, filepath.ToSlash(rel))
		} else {
			w.keys.widen(id)
		}
	}
	if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() && ev.Has(fsnotify.Create) {
		if id, ok := w.trees[dir]; ok {
			w.watchTree(ev.Name, id) // a directory made inside a mirror
		} else {
			// A parent of managed paths came to be: the keys watching
			// through its parent watch it instead, once things settle,
			// and are looked at (what they manage may have come with it).
			w.keys.rewatchOf(w.dirs[dir]...)
			ids = append(ids, w.dirs[dir]...)
		}
	}
	if _, ok := w.dirs[ev.Name]; ok && ev.Has(fsnotify.Remove) {
		if _, unwatched := w.unwatched[ev.Name]; !unwatched {
			w.absent[ev.Name] = struct{}{}
			w.retryNow() // a watched directory removed: its watch freed
		}
	}
	w.count()
	w.mu.Unlock()
	for _, id := range ids {
		w.keys.hint(id, TriggerDrift, settleDelay)
	}
}

// countRestarts counts the restarts a supervisor made on its own (a crash,
// a failed liveness probe) since the agent last read its status. Called
// with mu held.
func (w *watcher) countRestarts(id resource.ID, file string) {
	st, err := supervise.ReadStatus(file)
	if err != nil || st == nil {
		return
	}
	was, sawState := w.ran[id]
	w.ran[id] = st.State
	seen, known := w.runs[id]
	w.runs[id] = st.Restarts
	if sawState {
		w.changed(id, was, st)
	}
	if !known || st.Restarts <= seen {
		return // first sight, or a new process (the count starts again)
	}
	reason := RestartCrash
	if st.LastExit != nil && st.LastExit.Liveness {
		reason = RestartLiveness
	}
	for range st.Restarts - seen {
		w.restarted(reason)
	}
	w.restartedOnItsOwn(id, st, st.Restarts-seen)
}

// watchShims opens a pidfd on every re-executed supervisor not watched
// yet: its death is seen at once, even though it can no longer write its
// status. Called with mu held.
func (w *watcher) watchShims() {
	for file, id := range w.files {
		st, err := supervise.ReadStatus(file)
		if err != nil || st == nil || st.Shim.PID == 0 || w.shims[id] == st.Shim.PID || !st.Shim.Alive() {
			continue
		}
		if st.Shim.PID == os.Getpid() {
			continue // the agent supervises it: no death of its own to see
		}
		fd, err := pidfdOpen(st.Shim.PID)
		if err != nil {
			continue
		}
		w.shims[id] = st.Shim.PID
		go w.await(id, st.Shim.PID, fd)
	}
}

// await waits for a supervisor to end and queues its process.
func (w *watcher) await(id resource.ID, pid, fd int) {
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(w.stopped.Fd()), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != unix.EINTR {
			break
		}
	}
	if fds[1].Revents != 0 {
		return // the agent stops
	}
	w.mu.Lock()
	if w.shims[id] == pid {
		delete(w.shims, id)
	}
	w.mu.Unlock()
	w.keys.hint(id, TriggerProcessExit, 0)
}

// watchesCounted hears the watcher's count: the gauge, and the report
// status reads.
func (a *Agent) watchesCounted(c WatchCount) {
	a.opts.Metrics.SetUnwatched(c.Unwatched)
	a.publish()
}

// Watches is how many directories the agent watches for drift, and how
// many it cannot for want of inotify watches; zero before Run.
func (a *Agent) Watches() WatchCount {
	if w := a.watcher(); w != nil {
		return w.watches()
	}
	return WatchCount{}
}

// Degraded says what makes the agent work less well than it should while
// it is ready (/readyz's detail): directories unwatched for want of
// inotify watches. Empty when nothing does.
func (a *Agent) Degraded() string {
	return a.Watches().Condition(a.opts.DriftInterval)
}

// Condition says the lack of watches in a sentence; empty when none is
// unwatched. scan is the drift scan's interval, which covers them.
func (c WatchCount) Condition(scan time.Duration) string {
	if c.Unwatched == 0 {
		return ""
	}
	return fmt.Sprintf("out of inotify watches since %s: %d of %d directories unwatched (%s); the drift scan covers them every %s and their watches are retried; raise fs.inotify.max_user_watches",
		c.Since.Format(time.RFC3339), c.Unwatched, c.Watched+c.Unwatched, c.Err, scan)
}
