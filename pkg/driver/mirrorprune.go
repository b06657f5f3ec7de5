package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
	"golang.org/x/sys/unix"
)

// walkHost lists the live tree below d, never following symlinks.
func walkHost(d *hostfs.Dir, rel string, out map[string]liveEntry) error {
	entries, err := d.ReadDir()
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		st, err := d.Lstat(name)
		if missing(err) {
			continue
		}
		if err != nil {
			return err
		}
		le := liveEntry{Stat: st}
		switch {
		case st.Mode&fs.ModeSymlink != 0:
			if le.target, err = d.Readlink(name); err != nil {
				return err
			}
		case st.Mode.IsDir():
			sub, err := d.OpenDir(name)
			if err != nil {
				return err
			}
			err = walkHost(sub, p, out)
			sub.Close()
			if err != nil {
				return err
			}
		}
		out[p] = le
	}
	return nil
}

// pruneTree plans the prune of a mirrored tree: every entry cortex-sync
// wrote goes (recorded in the index, or created by a write that stopped
// before it recorded it, or a temporary file such a write left), children
// before parents; one changed on the host since is backed up first; what
// it did not write stays.
func pruneTree(env *Env, top *hostfs.Dir, old *index.Index, w *dirWork) ([]diff.FileChange, error) {
	live := map[string]liveEntry{}
	if err := walkHost(top, "", live); err != nil {
		return nil, err
	}
	var out []diff.FileChange
	prune := func(rel string, prev *index.Entry, intents []*index.Entry) error {
		le, ok := live[rel]
		if !ok {
			return nil
		}
		hash := sync.OnceValues(func() (string, error) {
			d, name := top, rel
			if i := strings.LastIndexByte(rel, '/'); i >= 0 {
				sub, err := openRel(top, rel[:i])
				if err != nil {
					return "", err
				}
				defer sub.Close()
				d, name = sub, rel[i+1:]
			}
			return hashFile(d, name, le.Size)
		})
		rec, ours, err := claimant(prev, intents, func(r *index.Entry) (bool, error) {
			switch {
			case le.Mode.IsDir():
				return r == prev || r.Mode.IsDir(), nil
			case le.Mode.Type() != r.Mode.Type():
				return false, nil
			case le.Mode&fs.ModeSymlink != 0:
				return le.target == r.Target, nil
			}
			// An intent holds no stat of the file created: it is judged by
			// content.
			return unchanged(le.Stat, r, r != prev || old.Racy(r.Stat), env.Verify, hash, nil)
		})
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if rec == nil {
			return nil // intended, but what is there is not what was
		}
		op := treeOp{rel: rel, action: diff.Delete, reason: diff.RemovedFromGit, typ: le.Mode.Type(), backup: !ours}
		w.ops = append(w.ops, op)
		if le.Mode.IsDir() {
			return nil // a directory goes only when nothing is left in it
		}
		out = append(out, diff.FileChange{Path: rel, Action: diff.Delete, Reason: diff.RemovedFromGit, Backup: op.backup})
		return nil
	}
	for rel, prev := range old.All() {
		if err := prune(rel, prev, old.Intents(rel)); err != nil {
			return nil, err
		}
	}
	done := ""
	for rel := range old.AllIntents() {
		if rel != done && old.Get(rel) == nil {
			if err := prune(rel, nil, old.Intents(rel)); err != nil {
				return nil, err
			}
		}
		done = rel
	}
	for rel, le := range live {
		if hostfs.IsTemp(path.Base(rel)) && le.Mode.IsRegular() {
			w.ops = append(w.ops, treeOp{rel: rel, action: diff.Delete, reason: diff.Drifted})
			out = append(out, diff.FileChange{Path: rel, Action: diff.Delete, Reason: diff.Drifted})
		}
	}
	// Path order: deleteTree goes backwards, children before parents.
	slices.SortFunc(w.ops, func(a, b treeOp) int { return strings.Compare(a.rel, b.rel) })
	slices.SortFunc(out, func(a, b diff.FileChange) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// deleteTree removes a directory. Declared absent, it goes whole (what
// cortex-sync did not write is backed up first). Pruned, only what
// cortex-sync wrote goes, and the directory itself only if it made it and
// nothing else is left inside.
func deleteTree(env *Env, c *diff.Change, w *dirWork) error {
	d, base, err := env.Root.Parent(c.Path, false)
	if missing(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	if c.Observed.Declared {
		if _, err := env.Backups.Save(d, base); err != nil {
			return err
		}
		if err := d.RemoveAll(base); err != nil {
			return err
		}
		return d.Sync()
	}
	top, err := d.OpenDir(base)
	if missing(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer top.Close()
	for i := len(w.ops) - 1; i >= 0; i-- { // children before parents
		op := w.ops[i]
		sub, name := top, op.rel
		if j := strings.LastIndexByte(op.rel, '/'); j >= 0 {
			if sub, err = openRel(top, op.rel[:j]); err != nil {
				if missing(err) {
					continue
				}
				return err
			}
			name = op.rel[j+1:]
		}
		if op.backup {
			if _, err := env.Backups.Save(sub, name); err != nil {
				if sub != top {
					sub.Close()
				}
				return err
			}
		}
		err := sub.Remove(name)
		if sub != top {
			sub.Close()
		}
		if err != nil && !missing(err) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
			return err
		}
	}
	if c.Record == nil || !c.Record.Created {
		return nil // it was there before cortex-sync: it stays
	}
	if err := d.Remove(base); err != nil && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return d.Sync()
}
