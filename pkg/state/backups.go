package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// BackupRun is one sync's backups: stateDir/backups/<time>/<in-root path>.
type BackupRun struct {
	Name  string
	Path  string
	Time  time.Time
	Files int
	Bytes int64
}

// backupTime is how driver.Backups names a run.
const backupTime = "20060102T150405.000000000Z"

// Backups lists the backup runs, newest first.
func (d Dir) Backups() ([]BackupRun, error) {
	dir := d.Sub("backups")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var runs []BackupRun
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		r := BackupRun{Name: e.Name(), Path: filepath.Join(dir, e.Name())}
		if t, err := time.Parse(backupTime, e.Name()); err == nil {
			r.Time = t
		} else if fi, err := e.Info(); err == nil {
			r.Time = fi.ModTime().UTC()
		}
		filepath.WalkDir(r.Path, func(_ string, de fs.DirEntry, err error) error {
			if err == nil && !de.IsDir() {
				r.Files++
				if fi, err := de.Info(); err == nil && fi.Mode().IsRegular() {
					r.Bytes += fi.Size()
				}
			}
			return nil
		})
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Time.After(runs[j].Time) })
	return runs, nil
}

// Retention says which backup runs to keep: the newest Keep runs, and every
// run younger than MaxAge. A run is deleted only when neither keeps it. A
// MaxAge of 0 keeps every run forever.
type Retention struct {
	Keep   int
	MaxAge time.Duration
}

// DefaultRetention keeps the last 10 runs and a month of them.
var DefaultRetention = Retention{Keep: 10, MaxAge: 30 * 24 * time.Hour}

func (r Retention) String() string {
	if r.MaxAge <= 0 {
		return "kept forever"
	}
	return fmt.Sprintf("the newest %d runs and every run younger than %s are kept", r.Keep, r.MaxAge)
}

// PruneBackups deletes the backup runs r does not keep, and returns them.
func (d Dir) PruneBackups(r Retention, now time.Time) ([]BackupRun, error) {
	if r.MaxAge <= 0 {
		return nil, nil
	}
	runs, err := d.Backups()
	if err != nil {
		return nil, err
	}
	var gone []BackupRun
	var errs []error
	for i, run := range runs {
		if i < r.Keep || now.Sub(run.Time) < r.MaxAge {
			continue
		}
		if err := os.RemoveAll(run.Path); err != nil {
			errs = append(errs, err)
			continue
		}
		gone = append(gone, run)
	}
	return gone, errors.Join(errs...)
}
