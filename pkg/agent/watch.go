package agent

import (
	"context"
	"errors"
	"log/slog"
	"maps"
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

	mu     sync.Mutex
	dirs   map[string][]resource.ID        // watched host directory → interested keys
	paths  map[string]resource.ID          // managed host path → its key
	trees  map[string]resource.ID          // host directory inside a mirror → its Directory
	files  map[string]resource.ID          // state file → its key
	tops   map[resource.ID]string          // a mirror's key → its top on the host
	shims  map[resource.ID]int             // key → supervisor pid watched
	runs   map[resource.ID]int             // key → restarts its supervisor reported
	ran    map[resource.ID]supervise.State // key → the state its supervisor reported last
	failed map[resource.ID]bool            // keys told failed, until told running again
	full   bool                            // ran out of watches (said once)
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
		files: map[string]resource.ID{}, shims: map[resource.ID]int{}, runs: map[resource.ID]int{}, ran: map[resource.ID]supervise.State{}, failed: map[resource.ID]bool{}}
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
	w.fs.Close()
	w.stop.Close() // every await returns; the read end stays open for them
}

// sync watches what the engine says, and nothing else.
func (w *watcher) sync(ws reconcile.Watches) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for dir := range w.dirs {
		if _, ok := ws.Dirs[dir]; !ok {
			w.fs.Remove(dir)
		}
	}
	for dir := range ws.Dirs {
		if _, ok := w.dirs[dir]; !ok {
			w.watch(dir)
		}
	}
	w.dirs, w.paths, w.trees, w.files, w.tops = ws.Dirs, ws.Paths, ws.Trees, ws.Files, ws.Tops
	w.watchShims()
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
	for dir, keys := range w.dirs {
		kept := slices.DeleteFunc(keys, func(id resource.ID) bool { return gone[id] })
		if len(kept) > 0 {
			w.dirs[dir] = kept
			continue
		}
		delete(w.dirs, dir)
		if _, ok := ws.Dirs[dir]; !ok {
			w.fs.Remove(dir)
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

// watch adds one inotify watch; when the kernel has none left, the drift
// scan covers the rest, and that is said once. Called with mu held.
func (w *watcher) watch(dir string) {
	err := w.fs.Add(dir)
	if err != nil && (errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EMFILE)) && !w.full {
		w.full = true
		w.log.Warn("out of inotify watches; the periodic drift scan covers the rest (raise fs.inotify.max_user_watches)", "dir", dir)
	}
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
