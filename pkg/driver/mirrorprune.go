package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
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
// wrote goes, children before parents; one changed on the host since is
// backed up first; what it did not write stays.
func pruneTree(env *Env, top *hostfs.Dir, old *state.Index, w *dirWork) ([]diff.FileChange, error) {
	live := map[string]liveEntry{}
	if err := walkHost(top, "", live); err != nil {
		return nil, err
	}
	var out []diff.FileChange
	for rel, prev := range old.All() {
		le, ok := live[rel]
		if !ok {
			continue
		}
		op := treeOp{rel: rel, action: diff.Delete, reason: diff.RemovedFromGit, typ: le.Mode.Type()}
		switch {
		case le.Mode.IsDir():
		case le.Mode.Type() != prev.Mode.Type():
			op.backup = true
		case le.Mode&fs.ModeSymlink != 0:
			op.backup = le.target != prev.Target
		default:
			hash := func() (string, error) {
				d, name := top, rel
				if i := strings.LastIndexByte(rel, '/'); i >= 0 {
					sub, err := openRel(top, rel[:i])
					if err != nil {
						return "", err
					}
					defer sub.Close()
					d, name = sub, rel[i+1:]
				}
				return hashFile(d, name)
			}
			ours, err := unchanged(le.Stat, prev, old.Racy(prev), env.Verify, hash)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", rel, err)
			}
			op.backup = !ours
		}
		w.ops = append(w.ops, op)
		if le.Mode.IsDir() {
			continue // a directory goes only when nothing is left in it
		}
		out = append(out, diff.FileChange{Path: rel, Action: diff.Delete, Reason: diff.RemovedFromGit, Backup: op.backup})
	}
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
