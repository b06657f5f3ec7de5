package supervise

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// The supervisor's files are the state dir's, and are reached through its
// door, pkg/state's Dir, as every other file of it is: the state dir's
// own path resolves as given, every name below it beneath it with no
// symlink followed (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or
// O_NOFOLLOW a component at a time). A symlink planted at procs, logs or
// any file in them is refused with an error that names it and says to
// move it away (it wraps state.ErrSymlink), never written through, never
// read through. Each file is named by its host path, as Files and
// procsDir make them: <state dir>/procs/FILE or <state dir>/logs/FILE, so
// the state dir is the file's directory's parent.

// door is the state dir that holds file, and file's name in it.
func door(file string) (state.Dir, string) {
	dir, base := filepath.Split(filepath.Clean(file))
	dir = filepath.Clean(dir)
	return state.At(filepath.Dir(dir)), filepath.Base(dir) + "/" + base
}

// dirDoor is the state dir's directory dir (procs, logs).
func dirDoor(dir string) state.Dir {
	dir = filepath.Clean(dir)
	return state.At(filepath.Dir(dir)).Sub(filepath.Base(dir))
}

// readFile reads one of the supervisor's files.
func readFile(file string) ([]byte, error) {
	d, name := door(file)
	return d.ReadFile(name)
}

// openFile opens one of the supervisor's files (flag as os.OpenFile's),
// 0600; with os.O_CREATE, its directory is made (0700) when missing.
func openFile(file string, flag int) (*os.File, error) {
	d, name := door(file)
	return d.OpenFile(name, flag, 0o600)
}

// removeFile deletes one of the supervisor's files; a missing one is not
// an error.
func removeFile(file string) error {
	d, name := door(file)
	return d.Remove(name)
}

// removeTemps deletes the temp files a write of file (a log's rotation)
// killed half-way left beside it.
func removeTemps(file string) error {
	d, name := door(file)
	dir, base := filepath.Split(name)
	h, err := d.Sub(dir).Open(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer h.Close()
	_, err = h.RemoveTemps(base)
	return err
}

// makeDir makes the state dir's directory dir (procs, logs), and the state
// dir, when missing.
func makeDir(dir string) error {
	h, err := dirDoor(dir).Open(true)
	if err != nil {
		return err
	}
	return h.Close()
}

// readDir lists the state dir's directory dir, sorted by name.
func readDir(dir string) ([]fs.DirEntry, error) { return dirDoor(dir).ReadDir() }

// putJSON writes a file of the supervisor's whole, through a temp file
// beside it: replacing it, or, not replace, only when none is there (one
// that is stays). Its directory must be there. A symlink in its place is
// refused, not replaced: it is not the supervisor's.
func putJSON(file string, v any, replace bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	d, name := door(file)
	dir, base := filepath.Split(name)
	h, err := d.Sub(dir).Open(false)
	if err != nil {
		return err
	}
	defer h.Close()
	if st, err := h.Lstat(base); err == nil && st.Mode&fs.ModeSymlink != 0 {
		return fmt.Errorf("write %s: %w; move it away", file, state.ErrSymlink)
	}
	tmp := base + ".tmp"
	if !replace {
		tmp = base + ".new"
	}
	f, err := h.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		h.Remove(tmp)
		return err
	}
	if replace {
		return h.Rename(tmp, base)
	}
	defer h.Remove(tmp)
	if err := h.Link(tmp, base); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}
