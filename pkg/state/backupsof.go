package state

import (
	"errors"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"
)

// Copy is one backup of a host path: the run that holds it and where.
type Copy struct {
	Run  string    `json:"run"`
	Time time.Time `json:"time"`
	// Path is the copy in the state dir.
	Path string `json:"path"`
}

// BackupsOf lists the backups that hold the in-root path p, newest first:
// a copy of p itself, or within a copy of a directory above it (copied
// whole). It looks up one name per run, never a run's contents (Backups
// counts those).
func (d Dir) BackupsOf(p string) ([]Copy, error) {
	p = path.Clean("/" + p)
	dir := d.BackupsDir()
	entries, err := dir.ReadDir()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var copies []Copy
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		run := dir.Sub(e.Name())
		st, err := run.Lstat(strings.TrimPrefix(p, "/"))
		if err != nil {
			continue
		}
		c := Copy{Run: e.Name(), Path: run.File(strings.TrimPrefix(p, "/")).Path()}
		if t, err := time.Parse(backupTime, e.Name()); err == nil {
			c.Time = t
		} else {
			c.Time = time.Unix(0, st.Mtime).UTC()
		}
		copies = append(copies, c)
	}
	sort.Slice(copies, func(i, j int) bool { return copies[i].Time.After(copies[j].Time) })
	return copies, nil
}
