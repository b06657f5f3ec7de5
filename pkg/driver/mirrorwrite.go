package driver

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sync"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/progress"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
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
