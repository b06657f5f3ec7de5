package driver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Backups keeps what cortex-sync overwrites or deletes that it had not
// written itself, under stateDir/backups/<run>/<in-root path>. Each copy
// has a path of its own, never written again: a copy that would land on an
// earlier one, or below it (an earlier copy of a directory or a symlink),
// starts a new run. So three hand edits of one file healed by the agent
// leave three copies, and a backed-up symlink is never a parent of a later
// copy (nor is one ever followed: the state dir is reached only through
// state.Dir).
type Backups struct {
	State state.Dir
	mu    sync.Mutex
	run   string // where copies go; "" until the first
}

// maxRuns bounds the runs one copy may try: a fresh run holds nothing, so
// only a racing copy of the same path can make it take another.
const maxRuns = 4

// Save copies the entry name of d to the backups before it is replaced. It
// returns where the copy went. Directories are copied whole.
func (b *Backups) Save(d *hostfs.Dir, name string) (string, error) {
	rel := path.Join(d.Path(), name)
	if err := d.Reserved(name); err != nil {
		return "", fmt.Errorf("back up %s: %w", rel, err) // never a copy of the backups into themselves
	}
	run := ""
	for range maxRuns {
		var err error
		if run, err = b.next(run); err != nil {
			return "", err
		}
		dst := b.State.BackupsDir().Sub(run)
		err = copyInto(d, name, dst, rel)
		if errors.Is(err, errTaken) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("back up %s: %w", rel, err)
		}
		return path.Join(dst.Path(), rel), nil
	}
	return "", fmt.Errorf("back up %s: its path was taken in %d runs in a row", rel, maxRuns)
}

// next is the run to copy into: the current one, or, when the current one
// is full, a new one (full is the run a copy was refused by).
func (b *Backups) next(full string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.run == "" || b.run == full {
		run, err := b.State.NewBackupRun(time.Now())
		if err != nil {
			return "", err
		}
		b.run = run
	}
	return b.run, nil
}

// errTaken is a copy's path already taken in its run, by an earlier copy
// or above it; the run is gone; or something that is not ours is in the way.
var errTaken = errors.New("taken")

// copyInto copies the entry name of d to run/rel, refusing to write on or
// below anything already there.
func copyInto(d *hostfs.Dir, name string, run state.Dir, rel string) error {
	top, err := run.Open(false)
	if err != nil {
		return taken(err)
	}
	defer top.Close()
	parent := top
	if dir := path.Dir(rel); dir != "/" {
		if parent, err = top.MkdirAllRel(dir[1:], 0o700); err != nil {
			return taken(err)
		}
		defer parent.Close()
	}
	if err := copyOut(d, name, parent, path.Base(rel)); err != nil {
		return err
	}
	return parent.Sync()
}

// taken turns the errors of a path in the way of a copy (an entry there, a
// non-directory above it, a symlink, a run deleted meanwhile) into errTaken.
func taken(err error) error {
	for _, e := range []error{fs.ErrExist, fs.ErrNotExist, unix.ENOTDIR, unix.ELOOP, state.ErrSymlink} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", errTaken, err)
		}
	}
	return err
}

// exclusive is the error of creating a copy: one already there is errTaken.
func exclusive(err error) error {
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: %w", errTaken, err)
	}
	return err
}

// copyOut copies an entry of the confined host to dst/dstName, durably,
// creating each entry anew: nothing already there is written to.
func copyOut(d *hostfs.Dir, name string, dst *hostfs.Dir, dstName string) error {
	st, err := d.Lstat(name)
	if err != nil {
		return err
	}
	switch {
	case st.Mode&fs.ModeSymlink != 0:
		target, err := d.Readlink(name)
		if err != nil {
			return err
		}
		return exclusive(dst.NewSymlink(target, dstName))
	case st.Mode.IsDir():
		if err := d.EnterReserved(name); err != nil {
			return err // the state dir by another path: never copied into itself
		}
		if err := dst.Mkdir(dstName, 0o700); err != nil {
			return exclusive(err)
		}
		sub, err := d.OpenDir(name)
		if err != nil {
			return err
		}
		defer sub.Close()
		out, err := dst.OpenDir(dstName)
		if err != nil {
			return err
		}
		defer out.Close()
		entries, err := sub.ReadDir()
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := copyOut(sub, e.Name(), out, e.Name()); err != nil {
				return err
			}
		}
		return nil
	case !st.Mode.IsRegular():
		return nil // sockets, fifos, devices: nothing to keep
	}
	src, err := d.Open(name)
	if err != nil {
		return err
	}
	defer src.Close()
	out, err := dst.OpenFile(dstName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return exclusive(err)
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
