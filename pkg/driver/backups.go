package driver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// Backups keeps what cortex-sync overwrites or deletes that it had not
// written itself, under stateDir/backups/<time>/<in-root path>.
type Backups struct {
	Dir  string // stateDir/backups
	once sync.Once
	run  string
	err  error
}

// Save copies the entry name of d to the backups before it is replaced. It
// returns where the copy went. Directories are copied whole.
func (b *Backups) Save(d *hostfs.Dir, name string) (string, error) {
	b.once.Do(func() {
		b.run = filepath.Join(b.Dir, time.Now().UTC().Format("20060102T150405.000000000Z"))
		b.err = os.MkdirAll(b.run, 0o700)
	})
	if b.err != nil {
		return "", fmt.Errorf("backups: %w", b.err)
	}
	dst := filepath.Join(b.run, filepath.FromSlash(path.Join(d.Path(), name)))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", err
	}
	if err := copyOut(d, name, dst); err != nil {
		return "", fmt.Errorf("back up %s: %w", path.Join(d.Path(), name), err)
	}
	return dst, nil
}

// copyOut copies an entry of the confined host to a plain path, durably.
func copyOut(d *hostfs.Dir, name, dst string) error {
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
		return os.Symlink(target, dst)
	case st.Mode.IsDir():
		if err := os.Mkdir(dst, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		sub, err := d.OpenDir(name)
		if err != nil {
			return err
		}
		defer sub.Close()
		entries, err := sub.ReadDir()
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := copyOut(sub, e.Name(), filepath.Join(dst, e.Name())); err != nil {
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
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
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
