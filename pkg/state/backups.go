package state

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// BackupRun is one sync's backups: stateDir/backups/<time>/<in-root path>.
type BackupRun struct {
	Name  string
	Path  string
	Time  time.Time
	Files int
	Bytes int64
}

// backupTime is how a run is named: when it was made.
const backupTime = "20060102T150405.000000000Z"

// NewBackupRun makes a new, empty backup run named for now (or the next
// free nanosecond) and returns its name. Runs are never made again under
// an old name: what retention deleted stays deleted.
func (d Dir) NewBackupRun(now time.Time) (string, error) {
	h, err := d.BackupsDir().Open(true)
	if err != nil {
		return "", fmt.Errorf("backups: %w", err)
	}
	defer h.Close()
	now = now.UTC()
	for range 1000 {
		name := now.Format(backupTime)
		err := h.Mkdir(name, 0o700)
		if !errors.Is(err, fs.ErrExist) {
			return name, err
		}
		now = now.Add(time.Nanosecond)
	}
	return "", fmt.Errorf("backups: no free run name in %s", d.BackupsDir())
}

// BackupsDir is where the backup runs are: backups/ in the state dir.
func (d Dir) BackupsDir() Dir { return d.Sub("backups") }

// Backups lists the backup runs, newest first. An entry of backups/ that
// is not a directory (a symlink put there) is not a run, and is never
// followed.
func (d Dir) Backups() ([]BackupRun, error) {
	dir := d.BackupsDir()
	h, err := dir.Open(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer h.Close()
	entries, err := h.ReadDir()
	if err != nil {
		return nil, err
	}
	var runs []BackupRun
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		r := BackupRun{Name: e.Name(), Path: dir.Sub(e.Name()).Path()}
		if t, err := time.Parse(backupTime, e.Name()); err == nil {
			r.Time = t
		} else if st, err := h.Lstat(e.Name()); err == nil {
			r.Time = time.Unix(0, st.Mtime).UTC()
		}
		if sub, err := h.OpenDir(e.Name()); err == nil {
			count(sub, &r)
			sub.Close()
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Time.After(runs[j].Time) })
	return runs, nil
}

// count adds what d holds to r's files and bytes, following no symlink.
func count(d *hostfs.Dir, r *BackupRun) {
	entries, _ := d.ReadDir()
	for _, e := range entries {
		if e.IsDir() {
			if sub, err := d.OpenDir(e.Name()); err == nil {
				count(sub, r)
				sub.Close()
			}
			continue
		}
		r.Files++
		if e.Type().IsRegular() {
			if st, err := d.Lstat(e.Name()); err == nil {
				r.Bytes += st.Size
			}
		}
	}
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
		if err := d.BackupsDir().RemoveAll(run.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		gone = append(gone, run)
	}
	return gone, errors.Join(errs...)
}
