package driver

import (
	"io/fs"
	"sync"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/source"
)

// A mirrored Directory (spec.source) is copied entry by entry, in three
// parts: the planner (mirrorplan.go) compares the desired tree, the tree
// index of what cortex-sync wrote and the host, directory by directory;
// the writer (mirrorwrite.go) carries out what was decided; prune
// (mirrorprune.go) removes what cortex-sync wrote once the Directory left
// Git. This file holds what they share.

// treeOp is one change inside a mirrored tree.
type treeOp struct {
	rel     string
	action  diff.Action
	reason  diff.Reason
	typ     fs.FileMode // fs.ModeDir, fs.ModeSymlink or 0 for a file
	mode    fs.FileMode
	target  string       // symlink target
	entry   source.Entry // the desired entry, for files
	replace bool         // something of another type is in the way
	backup  bool         // what is there was not written by cortex-sync
	chmod   bool         // only the mode is wrong
	seq     int          // the entry's place in the desired walk: ops run in it
}

// liveEntry is one entry of the live tree.
type liveEntry struct {
	hostfs.Stat
	target string
}

// mirrorMode is the mode of a mirrored entry: as Git keeps it, 0755 for
// directories and executables, 0644 for other files.
func mirrorMode(e source.Entry) fs.FileMode {
	if e.Mode.IsDir() || e.Mode&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

// openRel opens a relative directory below d in one call, never through a
// symlink.
func openRel(d *hostfs.Dir, rel string) (*hostfs.Dir, error) { return d.OpenDirRel(rel) }

// treeIndex is a tree's index as the planner's goroutines and the
// writer's share it.
type treeIndex struct {
	mu   sync.Mutex // guards x and creating
	x    *index.Index
	rule index.RacyRule // x's, asked without the lock
	// creating counts the creations named in the intent log and not yet
	// recorded in x (a directory or a symlink made by another goroutine):
	// the log is settled only when there are none.
	creating int
}

func newTreeIndex(x *index.Index) *treeIndex { return &treeIndex{x: x, rule: x.RacyRule()} }

func (t *treeIndex) get(rel string) *index.Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.x.Get(rel)
}

// records are rel's entry and what stopped writes intended there.
func (t *treeIndex) records(rel string) (prev *index.Entry, intents []*index.Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.x.Get(rel), t.x.Intents(rel)
}

// children lists what the index holds directly in rel into k.
func (t *treeIndex) children(rel string, k *index.Kids) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.x.ChildrenOf(rel, k)
}

// racy reports whether an entry recorded with stat st may have changed
// unseen (index.Index.Racy).
func (t *treeIndex) racy(st hostfs.Stat) bool { return t.rule.Racy(st) }

// set records an entry that stands; touch records it anew although it did
// not change (see index.Index.Touch).
func (t *treeIndex) set(rel string, e *index.Entry, touch bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.x.Set(rel, e)
	if touch {
		t.x.Touch(rel)
	}
}

// intend records entries about to be created; syncIntents makes them
// durable.
func (t *treeIndex) intend(es ...index.Intended) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.x.Intend(es...)
}

// create names one entry about to be created in the intent log, as
// intend does, and counts it as being created until created says it is
// recorded (or the write stops).
func (t *treeIndex) create(e index.Intended) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.creating++
	return t.x.Intend(e)
}

// created records the entry a create named, and ends its count.
func (t *treeIndex) created(rel string, e *index.Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.x.Set(rel, e)
	t.creating--
}

// settle bounds the intent log (index.Index.SettleIntents) when every
// intent it names is recorded.
func (t *treeIndex) settle() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.creating > 0 {
		return nil
	}
	return t.x.SettleIntents()
}

func (t *treeIndex) syncIntents() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.x.SyncIntents()
}

// forget deletes rel's entry, and with below those of what was inside.
func (t *treeIndex) forget(rel string, below bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.x.Delete(rel)
	if below {
		t.x.DeleteBelow(rel)
	}
}

// claimant picks the record a live entry is judged by, of a path's index
// entry and the intents of writes that stopped before their index was
// saved: the entry while the host holds what it records, else an intent
// whose creation the host holds, else the entry (nil when none), and then
// the live entry is not cortex-sync's as it is.
func claimant(prev *index.Entry, intents []*index.Entry, holds func(*index.Entry) (bool, error)) (*index.Entry, bool, error) {
	for _, r := range append([]*index.Entry{prev}, intents...) {
		if r == nil {
			continue
		}
		if ok, err := holds(r); ok || err != nil {
			return r, ok, err
		}
	}
	return prev, false, nil
}

func isDir(e *index.Entry) bool { return e.Mode.IsDir() }
