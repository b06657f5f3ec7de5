package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/progress"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// A tree with too many changes to hold (an initial sync above all) is
// planned again as it is written: each directory's changes are carried out
// as soon as they are decided, and forgotten. The crash rules are those of
// applyTree: what goes is backed up first where it is not cortex-sync's, a
// directory is made before what is inside, files are written whole to
// temporary names, made durable and renamed in batches, and the index is
// saved only after a last syncfs made the renames durable (a file renamed
// but not yet recorded is found equal to the source and recorded by the
// next run).

// Batches of staged files: one syncfs makes a batch durable before its
// renames. They are bounded by files and by the directories they hold
// open.
const (
	batchFiles = 4096
	batchDirs  = 256
)

// treeWriter carries out a tree's changes as they are planned.
type treeWriter struct {
	attrs attrs
	task  progress.Task

	mu      sync.Mutex // guards the batch
	pending []staged
	dirs    []*hostfs.Dir // the batch's directories, each its own descriptor
}

// staged is a file written to a temporary name, waiting for its batch's
// syncfs and its rename.
type staged struct {
	dir      *hostfs.Dir
	rel, tmp string
	sum, id  string
	backup   bool // what the rename replaces is backed up first
	wrote    hostfs.Stat
}

// writeTree plans a tree again and writes it directory by directory.
func writeTree(ctx context.Context, env *Env, r *resource.Resource, spec *DirectorySpec, top *hostfs.Dir, w *dirWork) error {
	t := &treeWriter{attrs: w.attrs, task: progress.None}
	if w.writes >= progressFiles {
		t.task = progress.Start(ctx, "writing "+spec.Path, int64(w.writes))
	}
	defer t.task.Done()
	if _, err := planTree(ctx, env, r, spec, top, w.index, t); err != nil {
		return err
	}
	// The renames, durable before the index records them.
	return env.Root.SyncFS()
}

// makeDir carries out the op of a directory the walk met, in its parent d.
func (p *treePlanner) makeDir(d *hostfs.Dir, name string, op *treeOp) error {
	if d == nil {
		return fmt.Errorf("%s is not a directory on the host", path.Dir(path.Join(p.spec.Path, op.rel)))
	}
	a := p.out.attrs
	if op.replace {
		if op.backup {
			if _, err := p.env.Backups.Save(d, name); err != nil {
				return err
			}
		}
		if err := d.RemoveAll(name); err != nil {
			return err
		}
		p.mu.Lock()
		p.idx.Delete(op.rel)
		p.idx.DeleteBelow(op.rel)
		p.mu.Unlock()
	}
	if op.chmod {
		return d.SetAttrs(name, hostfs.Attrs{Mode: op.mode, UID: a.uid, GID: a.gid}) // its index entry stands
	}
	e, err := mkdirInPlace(d, name, op, a)
	if err != nil {
		return err
	}
	p.set(op.rel, e, false)
	return nil
}

// writeDir carries out the changes decided in one directory, host (the
// directory rel): what goes first, then symlinks and modes, then files,
// written to temporary names and added to the batch.
func (p *treePlanner) writeDir(host *hostfs.Dir, rel string, ops, gone []treeOp) error {
	if len(ops) == 0 && len(gone) == 0 {
		return nil
	}
	if host == nil {
		return fmt.Errorf("%s is not a directory on the host", path.Join(p.spec.Path, rel))
	}
	env, a := p.env, p.out.attrs
	remove := func(op *treeOp) error {
		name := path.Base(op.rel)
		if op.backup {
			if _, err := env.Backups.Save(host, name); err != nil {
				return err
			}
		}
		if err := host.RemoveAll(name); err != nil {
			return err
		}
		p.mu.Lock()
		p.idx.Delete(op.rel)
		p.mu.Unlock()
		return nil
	}
	for i := range gone {
		if err := remove(&gone[i]); err != nil {
			return err
		}
	}
	var files []*treeOp
	for i := range ops {
		op := &ops[i]
		name := path.Base(op.rel)
		if op.replace {
			if err := remove(op); err != nil {
				return err
			}
		}
		switch {
		case op.chmod:
			e, err := chmodInPlace(host, name, op, a)
			if err != nil {
				return err
			}
			p.set(op.rel, e, false)
		case op.typ == fs.ModeSymlink:
			e, err := symlinkInPlace(env, host, name, op)
			if err != nil {
				return err
			}
			p.set(op.rel, e, false)
		default:
			files = append(files, op)
		}
	}
	if len(files) == 0 {
		return nil
	}
	return p.stage(host, files)
}

// stage writes a directory's files to temporary names, in parallel, and
// adds them to the batch, which is flushed when full.
func (p *treePlanner) stage(host *hostfs.Dir, files []*treeOp) error {
	dir, err := host.Dup() // the batch's: the walk closes its own
	if err != nil {
		return err
	}
	out := make([]staged, len(files))
	a := p.out.attrs
	err = parallel(p.env.Concurrency, len(files), func(i int) error {
		if err := p.ctx.Err(); err != nil {
			return err
		}
		op := files[i]
		var src io.ReadCloser
		var err error
		if op.entry.Open != nil {
			src, err = op.entry.Open()
		} else {
			src, err = p.env.Tree.Open(path.Join(p.spec.sourcePath, op.rel))
		}
		if err != nil {
			return err
		}
		defer src.Close()
		s := &out[i]
		s.dir, s.rel, s.backup = dir, op.rel, op.backup && !op.replace
		if s.tmp, s.sum, err = dir.WriteTemp(path.Base(op.rel), src, hostfs.Attrs{Mode: op.mode, UID: a.uid, GID: a.gid}); err != nil {
			return err
		}
		s.id, err = contentIDOf(op.entry, s.sum)
		p.out.task.Add(1)
		return err
	})
	t := p.out
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
		return p.flush()
	}
	return nil
}

// flush makes the batch durable with one syncfs, then renames its files
// into place and records them.
func (p *treePlanner) flush() error {
	t := p.out
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pending) == 0 {
		t.closeDirs()
		return nil
	}
	env := p.env
	if err := env.Root.SyncFS(); err != nil {
		t.cleanupLocked()
		return fmt.Errorf("syncfs: %w", err)
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
		var err error
		if s.wrote, err = s.dir.Lstat(s.tmp); err != nil {
			t.cleanupLocked()
			return err
		}
		if err := s.dir.Rename(s.tmp, name); err != nil {
			t.cleanupLocked()
			return err
		}
		s.tmp = ""
	}
	// Fingerprints are taken after the renames.
	err := parallel(env.Concurrency, len(t.pending), func(i int) error {
		s := &t.pending[i]
		st, err := s.dir.Lstat(path.Base(s.rel))
		if err != nil {
			return err
		}
		p.set(s.rel, &state.IndexEntry{Stat: fingerprintAfter(s.wrote, st), SHA256: s.sum, ContentID: s.id}, false)
		return nil
	})
	clear(t.pending)
	t.pending = t.pending[:0]
	t.closeDirs()
	return err
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

// written is a file staged in a temporary name, waiting for its rename.
type written struct {
	op    *treeOp
	dir   *hostfs.Dir
	tmp   string
	sum   string
	wrote hostfs.Stat // the temp file's stat before its rename
}

// applyTree carries out a tree's ops: deletions deepest first, directories
// parents first, then every file written to a temporary name and made
// durable, the renames, and an fsync of each touched directory.
func applyTree(ctx context.Context, env *Env, spec *DirectorySpec, top *hostfs.Dir, w *dirWork) error {
	dirs := map[string]*hostfs.Dir{"": top}
	defer func() {
		for rel, d := range dirs {
			if rel != "" {
				d.Close()
			}
		}
	}()
	touched := map[string]bool{}
	dirOf := func(rel string) (*hostfs.Dir, string, error) {
		parent, name := path.Split(rel)
		parent = strings.TrimSuffix(parent, "/")
		if d, ok := dirs[parent]; ok {
			return d, name, nil
		}
		d, err := openRel(top, parent)
		if err != nil {
			return nil, "", err
		}
		dirs[parent] = d
		return d, name, nil
	}
	a := w.attrs

	// Deletions and replacements, children before parents.
	for i := len(w.ops) - 1; i >= 0; i-- {
		op := &w.ops[i]
		if op.action != diff.Delete && !op.replace {
			continue
		}
		d, name, err := dirOf(op.rel)
		if err != nil {
			return err
		}
		if op.backup {
			if _, err := env.Backups.Save(d, name); err != nil {
				return err
			}
		}
		if sub, ok := dirs[op.rel]; ok {
			sub.Close()
			delete(dirs, op.rel)
		}
		if err := d.RemoveAll(name); err != nil {
			return err
		}
		w.index.Delete(op.rel)
		touched[path.Dir(op.rel)] = true
	}
	// Directories and symlinks, parents first; files are staged.
	var stage []*treeOp
	for i := range w.ops {
		op := &w.ops[i]
		if op.action == diff.Delete {
			continue
		}
		d, name, err := dirOf(op.rel)
		if err != nil {
			return err
		}
		switch {
		case op.chmod && op.typ == fs.ModeDir:
			if err := d.SetAttrs(name, hostfs.Attrs{Mode: op.mode, UID: a.uid, GID: a.gid}); err != nil {
				return err
			}
			// its index entry stands
		case op.chmod:
			e, err := chmodInPlace(d, name, op, a)
			if err != nil {
				return err
			}
			w.index.Set(op.rel, e)
		case op.typ == fs.ModeDir:
			e, err := mkdirInPlace(d, name, op, a)
			if err != nil {
				return err
			}
			w.index.Set(op.rel, e)
			touched[path.Dir(op.rel)] = true
		case op.typ == fs.ModeSymlink:
			e, err := symlinkInPlace(env, d, name, op)
			if err != nil {
				return err
			}
			w.index.Set(op.rel, e)
			touched[path.Dir(op.rel)] = true
		default:
			stage = append(stage, op)
		}
	}
	if len(stage) > 0 {
		if err := writeStaged(ctx, env, spec, stage, dirOf, touched, w); err != nil {
			return err
		}
	}
	return syncDirs(env, top, dirs, touched)
}

// mkdirInPlace makes a directory (or finds it made), with the desired
// owner, and returns its index entry.
func mkdirInPlace(d *hostfs.Dir, name string, op *treeOp, a attrs) (*state.IndexEntry, error) {
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
	return &state.IndexEntry{Stat: st}, nil
}

// chmodInPlace gives a file that holds the desired content its desired
// mode and owner, and returns its index entry.
func chmodInPlace(d *hostfs.Dir, name string, op *treeOp, a attrs) (*state.IndexEntry, error) {
	if err := d.SetAttrs(name, hostfs.Attrs{Mode: op.mode, UID: a.uid, GID: a.gid}); err != nil {
		return nil, err
	}
	st, err := d.Lstat(name)
	if err != nil {
		return nil, err
	}
	sum, err := hashFile(d, name)
	if err != nil {
		return nil, err
	}
	id, err := op.entry.ContentID()
	if err != nil {
		return nil, err
	}
	return &state.IndexEntry{Stat: st, SHA256: sum, ContentID: id}, nil
}

// symlinkInPlace makes a symlink (what was in its way gone already, backed
// up first when it was not ours), and returns its index entry.
func symlinkInPlace(env *Env, d *hostfs.Dir, name string, op *treeOp) (*state.IndexEntry, error) {
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
	return &state.IndexEntry{Stat: st, Target: op.target}, nil
}

// syncDirs makes renames and removals durable: an fsync per touched
// directory when there are few, one syncfs when there are many (it costs
// about as much as a handful of fsyncs).
func syncDirs(env *Env, top *hostfs.Dir, dirs map[string]*hostfs.Dir, touched map[string]bool) error {
	if len(touched) > 16 {
		return env.Root.SyncFS()
	}
	for rel := range touched {
		d, ok := dirs[rel]
		if rel == "." {
			d, ok = top, true
		}
		if ok {
			if err := d.Sync(); err != nil {
				return err
			}
		} else if err := env.Root.SyncFS(); err != nil {
			return err
		}
	}
	return nil
}

// fsyncBatch is the most staged files made durable by an fsync each rather
// than by one syncfs.
const fsyncBatch = 64

// writeStaged writes files to temporary names in parallel, makes them
// durable (an fsync each, or one syncfs for a large batch), then renames
// them into place.
// progressFiles is how many files to write make a bar worth drawing.
const progressFiles = 1000

func writeStaged(ctx context.Context, env *Env, spec *DirectorySpec, stage []*treeOp, dirOf func(string) (*hostfs.Dir, string, error), touched map[string]bool, w *dirWork) error {
	out := make([]written, len(stage))
	for i, op := range stage {
		d, _, err := dirOf(op.rel) // open every parent before going parallel
		if err != nil {
			return err
		}
		out[i] = written{op: op, dir: d}
	}
	a := w.attrs
	// A few files are synced one by one; a large batch costs less with one
	// syncfs, which also flushes what other processes wrote to the
	// filesystem.
	few := len(out) <= fsyncBatch
	task := progress.None
	if len(out) >= progressFiles {
		task = progress.Start(ctx, "writing "+spec.Path, int64(len(out)))
	}
	defer task.Done()
	cleanup := func() {
		for _, s := range out {
			if s.tmp != "" {
				s.dir.Remove(s.tmp)
			}
		}
	}
	err := parallel(env.Concurrency, len(out), func(i int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		s := &out[i]
		var src io.ReadCloser
		var err error
		if s.op.entry.Open != nil {
			src, err = s.op.entry.Open()
		} else {
			src, err = env.Tree.Open(path.Join(spec.sourcePath, s.op.rel))
		}
		if err != nil {
			return err
		}
		defer src.Close()
		s.tmp, s.sum, err = s.dir.WriteTemp(path.Base(s.op.rel), src, hostfs.Attrs{Mode: s.op.mode, UID: a.uid, GID: a.gid})
		if err == nil && few {
			err = s.dir.SyncFile(s.tmp)
		}
		task.Add(1)
		return err
	})
	if err != nil {
		cleanup()
		return err
	}
	if !few {
		if err := env.Root.SyncFS(); err != nil {
			cleanup()
			return fmt.Errorf("syncfs: %w", err)
		}
	}
	for i := range out {
		s := &out[i]
		name := path.Base(s.op.rel)
		if s.op.backup && !s.op.replace {
			if _, err := env.Backups.Save(s.dir, name); err != nil {
				cleanup()
				return err
			}
		}
		if s.wrote, err = s.dir.Lstat(s.tmp); err != nil {
			cleanup()
			return err
		}
		if err := s.dir.Rename(s.tmp, name); err != nil {
			cleanup()
			return err
		}
		s.tmp = ""
		touched[path.Dir(s.op.rel)] = true
	}
	// Fingerprints are taken after the renames; content IDs come from the
	// source, cheap where it already knows them.
	return parallel(env.Concurrency, len(out), func(i int) error {
		s := &out[i]
		st, err := s.dir.Lstat(path.Base(s.op.rel))
		if err != nil {
			return err
		}
		st = fingerprintAfter(s.wrote, st)
		id, err := contentIDOf(s.op.entry, s.sum)
		if err != nil {
			return err
		}
		e := &state.IndexEntry{Stat: st, SHA256: s.sum, ContentID: id}
		w.mu.Lock()
		w.index.Set(s.op.rel, e)
		w.mu.Unlock()
		return nil
	})
}

// contentIDOf names an entry's content after it was copied with the given
// SHA-256: a tree whose IDs are digests learns it without a second read.
func contentIDOf(e source.Entry, sum string) (string, error) {
	if e.Digested != nil {
		return e.Digested(sum), nil
	}
	return e.ContentID()
}
