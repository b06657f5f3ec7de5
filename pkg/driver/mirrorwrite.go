package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"sync"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/progress"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
)

// The writer carries out a tree's changes directory by directory, whether
// the plan held them as ops (applyTree) or the tree is planned again as it
// is written (writeTree: a tree with too many changes to hold, an initial
// sync above all, each directory's changes carried out as soon as they
// are decided, and forgotten). One set of crash rules holds for both:
//
//   - what goes is backed up first where it is not cortex-sync's;
//   - a directory is made before what is inside;
//   - what is created (a directory, a symlink, a file renamed into place)
//     is named first in the index's intent log, with what it will hold; a
//     batch's intents are made durable before its renames, and every
//     intent before the host is synced;
//   - files are written whole to temporary names and join a batch, which
//     is made durable (an fsync a file when the tree writes few, else one
//     syncfs) before its renames;
//   - the renames and removals are made durable (an fsync of each touched
//     directory, one syncfs when there are many) before the index records
//     them.
//
// So a write stopped at any point (a kill, a failure) leaves nothing it
// created unnamed: what the index does not record yet, an intent names,
// and the next run adopts it if it is still desired and deletes it if not.

// Batches of staged files: one syncfs makes a batch durable before its
// renames. They are bounded by files and by the directories they hold
// open.
const batchDirs = 256

var batchFiles = 4096 // a variable for tests

// fsyncBatch is the most files a tree writes that are made durable by an
// fsync each rather than by a syncfs a batch (which costs about as much as
// a few dozen fsyncs, and also flushes what other processes wrote).
const fsyncBatch = 64

// fsyncDirs is the most touched directories made durable by an fsync each
// rather than by one syncfs.
const fsyncDirs = 16

// progressFiles is how many files to write make a bar worth drawing.
const progressFiles = 1000

// createdHook, set by tests only, is called after the writer created an
// entry on the host (a rename into place, a directory, a symlink): an
// error stops the writer there, as a failure or a kill would.
var createdHook func(rel string) error

// created calls createdHook.
func created(rel string) error {
	if createdHook == nil {
		return nil
	}
	return createdHook(rel)
}

// treeWriter carries out a tree's changes.
type treeWriter struct {
	env   *Env
	spec  *DirectorySpec
	top   *hostfs.Dir
	attrs attrs
	ix    *treeIndex
	task  progress.Task
	few   bool // few files to write: an fsync each, no syncfs a batch

	mu      sync.Mutex // guards the batch and touched
	pending []staged
	dirs    []*hostfs.Dir // the batch's directories, each its own descriptor
	// touched are the directories whose entries changed; many: more than
	// fsyncDirs, made durable by one syncfs.
	touched map[string]bool
	many    bool
	// relists are the directories written, to be recorded, once their
	// writes are in place, as holding exactly these names (namesDigest).
	relists []relist
}

type relist struct{ rel, names string }

// relistLater records the directory at rel, once the writes are done, as
// holding exactly the desired names digested as names, when it does.
func (t *treeWriter) relistLater(rel, names string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.relists = append(t.relists, relist{rel, names})
}

// relist records each directory written as holding exactly its desired
// names, when it does: stat first, then list, so that a change after the
// stat moves the directory's stat past what is recorded. The caller holds
// t.mu, or no other goroutine writes.
func (t *treeWriter) relist() error {
	for _, r := range t.relists {
		d, err := openRel(t.top, r.rel)
		if missing(err) {
			continue
		} else if err != nil {
			return err
		}
		st, err := d.Lstat(".")
		var listed []hostfs.DirEntry
		if err == nil {
			listed, err = d.List()
		}
		d.Close()
		if err != nil {
			return err
		}
		names := nameSets.Get().(*nameSet)
		for _, e := range listed {
			names.add(e.Name)
		}
		same := names.String() == r.names
		names.reset()
		if same {
			t.ix.set(r.rel, &index.Entry{Stat: st, ContentID: r.names}, false)
		}
	}
	t.relists = nil
	return nil
}

// staged is a file written to a temporary name, waiting for its batch's
// sync and its rename.
type staged struct {
	dir      *hostfs.Dir
	rel, tmp string
	sums     hostfs.Sums
	id       string
	backup   bool // what the rename replaces is backed up first
	wrote    hostfs.Stat
}

// newTreeWriter is the writer of the tree at top, recording in w's index.
func newTreeWriter(ctx context.Context, env *Env, spec *DirectorySpec, top *hostfs.Dir, w *dirWork) *treeWriter {
	t := &treeWriter{env: env, spec: spec, top: top, attrs: w.attrs, ix: newTreeIndex(w.index), task: progress.None,
		few: w.writes <= fsyncBatch, touched: map[string]bool{}}
	if w.writes >= progressFiles {
		t.task = progress.Start(ctx, "writing "+spec.Path, int64(w.writes))
	}
	return t
}

// writeTree plans a tree again and writes it directory by directory.
func writeTree(ctx context.Context, env *Env, r *resource.Resource, spec *DirectorySpec, top *hostfs.Dir, w *dirWork) error {
	t := newTreeWriter(ctx, env, spec, top, w)
	defer t.task.Done()
	if _, err := planTree(ctx, env, r, spec, top, t.ix, t); err != nil {
		t.cleanup()
		return err
	}
	return t.finish()
}

// applyTree carries out the ops a plan held: what goes or is in the way
// first, children before parents; then directories, parents first; then
// each directory's symlinks, modes and files.
func applyTree(ctx context.Context, env *Env, spec *DirectorySpec, top *hostfs.Dir, w *dirWork) error {
	t := newTreeWriter(ctx, env, spec, top, w)
	defer t.task.Done()
	dirs := map[string]*hostfs.Dir{"": top}
	defer func() {
		for rel, d := range dirs {
			if rel != "" {
				d.Close()
			}
		}
	}()
	open := func(rel string) (*hostfs.Dir, error) {
		if d, ok := dirs[rel]; ok {
			return d, nil
		}
		d, err := openRel(top, rel)
		if err != nil {
			return nil, err
		}
		dirs[rel] = d
		return d, nil
	}
	ops := slices.Clone(w.ops) // the plan's stay as planned
	err := func() error {
		for i := len(ops) - 1; i >= 0; i-- {
			op := &ops[i]
			if op.action != diff.Delete && !op.replace {
				continue
			}
			d, err := open(parentOf(op.rel))
			if err != nil {
				return err
			}
			if sub, ok := dirs[op.rel]; ok {
				sub.Close()
				delete(dirs, op.rel)
			}
			if err := t.remove(d, op); err != nil {
				return err
			}
			op.replace, op.backup = false, false // out of the way, backed up
		}
		var order []string // directories with entries to write, first met first
		inDir := map[string][]treeOp{}
		for i := range ops {
			op := &ops[i]
			parent := parentOf(op.rel)
			switch {
			case op.action == diff.Delete:
			case op.typ == fs.ModeDir:
				d, err := open(parent)
				if err != nil {
					return err
				}
				if err := t.makeDir(d, path.Base(op.rel), op); err != nil {
					return err
				}
			default:
				if _, ok := inDir[parent]; !ok {
					order = append(order, parent)
				}
				inDir[parent] = append(inDir[parent], *op)
			}
		}
		for _, rel := range order {
			d, err := open(rel)
			if err != nil {
				return err
			}
			if err := t.writeDir(ctx, d, rel, inDir[rel], nil); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		t.cleanup()
		return err
	}
	return t.finish()
}

// parentOf is the directory of a tree entry, "" for the top.
func parentOf(rel string) string {
	if d := path.Dir(rel); d != "." {
		return d
	}
	return ""
}

// touch notes that the entries of directory rel changed.
func (t *treeWriter) touch(rel string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.touchLocked(rel)
}

func (t *treeWriter) touchLocked(rel string) {
	if t.many {
		return
	}
	t.touched[rel] = true
	if len(t.touched) > fsyncDirs {
		t.many, t.touched = true, nil
	}
}

// remove backs up what is at op's path where it is not cortex-sync's, then
// removes it, in its parent d.
func (t *treeWriter) remove(d *hostfs.Dir, op *treeOp) error {
	name := path.Base(op.rel)
	if op.backup {
		if _, err := t.env.Backups.Save(d, name); err != nil {
			return err
		}
	}
	if err := d.RemoveAll(name); err != nil {
		return err
	}
	t.ix.forget(op.rel, false)
	t.touch(parentOf(op.rel))
	return nil
}

// makeDir carries out the op of a directory, in its parent d.
func (t *treeWriter) makeDir(d *hostfs.Dir, name string, op *treeOp) error {
	if d == nil {
		return fmt.Errorf("%s is not a directory on the host", path.Dir(path.Join(t.spec.Path, op.rel)))
	}
	a := t.attrs
	if op.replace {
		if err := t.remove(d, op); err != nil {
			return err
		}
		t.ix.forget(op.rel, true)
	}
	if op.chmod {
		return d.SetAttrs(name, hostfs.Attrs{Mode: op.mode, UID: a.uid, GID: a.gid}) // its index entry stands
	}
	if err := t.ix.create(index.Intended{Path: op.rel, Entry: &index.Entry{Stat: hostfs.Stat{Mode: fs.ModeDir | op.mode}}}); err != nil {
		return err
	}
	e, err := mkdirInPlace(d, name, op, a)
	if err != nil {
		return err
	}
	t.ix.created(op.rel, e)
	t.touch(parentOf(op.rel))
	return created(op.rel)
}

// writeDir carries out the changes decided in one directory, host (the
// directory rel): what goes first, then symlinks and modes, then files,
// written to temporary names and added to the batch.
func (t *treeWriter) writeDir(ctx context.Context, host *hostfs.Dir, rel string, ops, gone []treeOp) error {
	if len(ops) == 0 && len(gone) == 0 {
		return nil
	}
	if host == nil {
		return fmt.Errorf("%s is not a directory on the host", path.Join(t.spec.Path, rel))
	}
	for i := range gone {
		if err := t.remove(host, &gone[i]); err != nil {
			return err
		}
	}
	var files []*treeOp
	for i := range ops {
		op := &ops[i]
		name := path.Base(op.rel)
		if op.replace {
			if err := t.remove(host, op); err != nil {
				return err
			}
		}
		switch {
		case op.chmod:
			e, err := chmodInPlace(host, name, op, t.attrs)
			if err != nil {
				return err
			}
			t.ix.set(op.rel, e, false)
		case op.typ == fs.ModeSymlink:
			if err := t.ix.create(index.Intended{Path: op.rel, Entry: &index.Entry{Stat: hostfs.Stat{Mode: fs.ModeSymlink | 0o777}, Target: op.target}}); err != nil {
				return err
			}
			e, err := symlinkInPlace(t.env, host, name, op)
			if err != nil {
				return err
			}
			t.ix.created(op.rel, e)
			t.touch(rel)
			if err := created(op.rel); err != nil {
				return err
			}
		default:
			files = append(files, op)
		}
	}
	if len(files) == 0 {
		return nil
	}
	return t.stage(ctx, host, files)
}

// stage writes a directory's files to temporary names, in parallel, and
// adds them to the batch, which is flushed when full.
func (t *treeWriter) stage(ctx context.Context, host *hostfs.Dir, files []*treeOp) error {
	dir, err := host.Dup() // the batch's: the caller closes its own
	if err != nil {
		return err
	}
	out := make([]staged, len(files))
	a := t.attrs
	err = parallel(t.env.Concurrency, len(files), func(i int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		op := files[i]
		var src io.ReadCloser
		var err error
		if open := op.entry.OpenFunc(); open != nil {
			src, err = open()
		} else {
			src, err = t.env.Tree.Open(path.Join(t.spec.sourcePath, op.rel))
		}
		if err != nil {
			return err
		}
		defer src.Close()
		s := &out[i]
		s.dir, s.rel, s.backup = dir, op.rel, op.backup && !op.replace
		if s.tmp, s.sums, err = dir.WriteTemp(path.Base(op.rel), src, hostfs.Attrs{Mode: op.mode, UID: a.uid, GID: a.gid}); err != nil {
			return err
		}
		if t.few {
			if err := dir.SyncFile(s.tmp); err != nil {
				return err
			}
		}
		s.id, err = contentIDOf(op.entry, s.sums.SHA256)
		t.task.Add(1)
		return err
	})
	t.mu.Lock()
	for _, s := range out {
		if s.tmp != "" {
			t.pending = append(t.pending, s)
		}
	}
	t.dirs = append(t.dirs, dir)
	full := len(t.pending) >= batchFiles || len(t.dirs) >= batchDirs
	t.mu.Unlock()
	if err != nil {
		return err // the temporary files go with the batch
	}
	if full {
		return t.flush()
	}
	return nil
}

// flush names the batch's files in the intent log, makes the intents and
// the files durable (the files were synced one by one when few, else with
// one syncfs), then renames the files into place and records them.
func (t *treeWriter) flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pending) == 0 {
		t.closeDirs()
		return nil
	}
	env := t.env
	intents := make([]index.Intended, len(t.pending))
	for i := range t.pending {
		s := &t.pending[i]
		var err error
		if s.wrote, err = s.dir.Lstat(s.tmp); err != nil {
			t.cleanupLocked()
			return err
		}
		// The rename keeps the inode, size and mtime, and moves the ctime:
		// an intent is matched by content, never by its stat.
		st := s.wrote
		st.Ctime = 0
		intents[i] = index.Intended{Path: s.rel, Entry: &index.Entry{Stat: st, SHA256: s.sums.SHA256, ContentID: s.id}}
	}
	if err := t.ix.intend(intents...); err != nil {
		t.cleanupLocked()
		return err
	}
	if err := t.ix.syncIntents(); err != nil {
		t.cleanupLocked()
		return err
	}
	if !t.few {
		if err := env.Root.SyncFS(); err != nil {
			t.cleanupLocked()
			return fmt.Errorf("syncfs: %w", err)
		}
	}
	for i := range t.pending {
		s := &t.pending[i]
		name := path.Base(s.rel)
		if s.backup {
			if _, err := env.Backups.Save(s.dir, name); err != nil {
				t.cleanupLocked()
				return err
			}
		}
		if err := s.dir.Rename(s.tmp, name); err != nil {
			t.cleanupLocked()
			return err
		}
		s.tmp = ""
		t.touchLocked(parentOf(s.rel))
		if err := created(s.rel); err != nil {
			t.cleanupLocked()
			return err
		}
	}
	// Fingerprints are taken after the renames.
	err := parallel(env.Concurrency, len(t.pending), func(i int) error {
		s := &t.pending[i]
		st, err := s.dir.Lstat(path.Base(s.rel))
		if err != nil {
			return err
		}
		t.ix.set(s.rel, &index.Entry{Stat: fingerprintAfter(s.wrote, st), SHA256: s.sums.SHA256, ContentID: s.id, XXH3: s.sums.XXH3}, false)
		return nil
	})
	clear(t.pending)
	t.pending = t.pending[:0]
	t.closeDirs()
	if err != nil {
		return err
	}
	// The directories to list again had their writes staged before this
	// batch was: they are in place now, and are not held until the end
	// (24,000 of them at 1,000,000 files).
	if err := t.relist(); err != nil {
		return err
	}
	// Every intent of the batch is recorded: a long write's intent log
	// may start anew.
	return t.ix.settle()
}

// finish writes what is left of the batch, then makes the renames and
// removals durable: the index may record them after.
func (t *treeWriter) finish() error {
	if err := t.flush(); err != nil {
		return err
	}
	if err := t.ix.syncIntents(); err != nil {
		return err // the directories and symlinks made since the last batch
	}
	if err := t.relist(); err != nil {
		return err
	}
	if t.many {
		return t.env.Root.SyncFS()
	}
	for rel := range t.touched {
		d := t.top
		if rel != "" {
			var err error
			if d, err = openRel(t.top, rel); missing(err) {
				continue // gone since: its removal touched its parent
			} else if err != nil {
				return err
			}
		}
		err := d.Sync()
		if d != t.top {
			d.Close()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// cleanup removes the batch's temporary files after a failure.
func (t *treeWriter) cleanup() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanupLocked()
}

func (t *treeWriter) cleanupLocked() {
	for _, s := range t.pending {
		if s.tmp != "" {
			s.dir.Remove(s.tmp)
		}
	}
	t.pending = nil
	t.closeDirs()
}

func (t *treeWriter) closeDirs() {
	for _, d := range t.dirs {
		d.Close()
	}
	t.dirs = nil
}

// mkdirInPlace makes a directory (or finds it made), with the desired
// owner, and returns its index entry.
func mkdirInPlace(d *hostfs.Dir, name string, op *treeOp, a attrs) (*index.Entry, error) {
	if err := d.Mkdir(name, op.mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	if a.uid >= 0 || a.gid >= 0 {
		if err := d.Chown(name, a.uid, a.gid); err != nil {
			return nil, err
		}
	}
	st, err := d.Lstat(name)
	if err != nil {
		return nil, err
	}
	return &index.Entry{Stat: st}, nil
}

// chmodInPlace gives a file that holds the desired content its desired
// mode and owner, and returns its index entry.
func chmodInPlace(d *hostfs.Dir, name string, op *treeOp, a attrs) (*index.Entry, error) {
	if err := d.SetAttrs(name, hostfs.Attrs{Mode: op.mode, UID: a.uid, GID: a.gid}); err != nil {
		return nil, err
	}
	st, err := d.Lstat(name)
	if err != nil {
		return nil, err
	}
	sums, err := d.HashFile(name, st.Size)
	if err != nil {
		return nil, err
	}
	id, err := op.entry.ID()
	if err != nil {
		return nil, err
	}
	return &index.Entry{Stat: st, SHA256: sums.SHA256, ContentID: id, XXH3: sums.XXH3}, nil
}

// symlinkInPlace makes a symlink (what was in its way gone already, backed
// up first when it was not ours), and returns its index entry.
func symlinkInPlace(env *Env, d *hostfs.Dir, name string, op *treeOp) (*index.Entry, error) {
	if op.backup && !op.replace {
		if _, err := env.Backups.Save(d, name); err != nil {
			return nil, err
		}
	}
	if err := d.Symlink(op.target, name); err != nil {
		return nil, err
	}
	st, err := d.Lstat(name)
	if err != nil {
		return nil, err
	}
	return &index.Entry{Stat: st, Target: op.target}, nil
}

// contentIDOf names an entry's content after it was copied with the given
// SHA-256: a tree whose IDs are digests learns it without a second read.
func contentIDOf(e source.Entry, sum string) (string, error) {
	if digested := e.DigestedFunc(); digested != nil {
		return digested(sum), nil
	}
	return e.ID()
}
