package state

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// Finding is one thing state check looked at.
type Finding struct {
	File string // relative to the state dir
	OK   bool
	What string // what was found
	// Fix is what repair does (Repairable) or what the user must do.
	Fix        string
	Repairable bool
	repair     func() error
}

// Check verifies the state dir: the snapshot, its rollback mark, the tree
// indexes and source stat caches, and temp files left by a killed write
// (never one whose writer still runs: hostfs.Abandoned).
func (d Dir) Check() []Finding {
	var out []Finding
	snap, err := d.Load()
	var corrupt bool
	switch {
	case err == nil && snap.Serial == 0:
		out = append(out, Finding{File: "state.json", OK: true, What: "no snapshot yet: nothing applied"})
	case err == nil:
		out = append(out, Finding{File: "state.json", OK: true, What: fmt.Sprintf("serial %d, lineage %s, %s, revision %s", snap.Serial, snap.Lineage, plural(len(snap.Inventory), "resource"), orNone(snap.Revision))})
	case errors.Is(err, ErrCorruptSnapshot):
		corrupt = true
		out = append(out, Finding{File: "state.json", What: err.Error(),
			Fix: "repair cannot rebuild it: restore state.json from a backup of the state dir (then run `cortex-sync state accept-rollback`), or move it away to start afresh; cortex-sync then forgets what it applied: it adopts what matches Git, and prunes nothing it made before"})
	default:
		out = append(out, Finding{File: "state.json", What: err.Error(), Fix: "repair cannot fix this: see the message"})
	}
	if snap != nil {
		if rb := snap.Rollback(); rb != nil {
			out = append(out, Finding{File: "state.serial", What: rb.Error(), Fix: "repair will not decide this for you: check the inventory (`cortex-sync state export`), then run `cortex-sync state accept-rollback`"})
		}
		if len(snap.Creating) > 0 {
			ids := make([]string, len(snap.Creating))
			for i, c := range snap.Creating {
				ids[i] = c.ID
			}
			out = append(out, Finding{File: "state.json", OK: true, What: fmt.Sprintf("a sync was interrupted while creating %s (%s); the next sync finishes them", plural(len(ids), "resource"), strings.Join(ids[:min(3, len(ids))], ", "))})
		}
	}
	owned := map[string]bool{}
	if snap != nil {
		for _, e := range snap.Inventory {
			owned[strings.ReplaceAll(e.ID, "/", ".")+".idx"] = true
		}
	}
	for _, sub := range []string{"trees", "cache"} {
		entries, err := d.Sub(sub).ReadDir()
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			out = append(out, Finding{File: sub, What: err.Error(), Fix: "repair cannot fix this: see the message"})
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".idx") || hostfs.IsTemp(e.Name()) {
				continue // a temp file (an index's, cut short by a kill) is listed below as one
			}
			rel := path.Join(sub, e.Name())
			p := d.File(rel)
			x, err := loadIndex(p, trust{whole: true}) // whatever a note or an earlier load says
			switch {
			case err != nil && !errors.Is(err, ErrCorruptIndex):
				out = append(out, Finding{File: rel, What: err.Error(), Fix: "repair cannot fix this: see the message"})
			case err != nil && sub == "trees":
				out = append(out, Finding{File: rel, What: err.Error(), Repairable: true,
					Fix:    "delete it: the next sync re-hashes the tree and adopts the files that match Git; files removed from Git meanwhile are no longer known as cortex-sync's and stay on the host",
					repair: func() error { return removeIndex(p) }})
			case err != nil:
				out = append(out, Finding{File: rel, What: err.Error(), Repairable: true,
					Fix:    "delete it: it is a cache of the source's file hashes, rebuilt by the next run",
					repair: func() error { return removeIndex(p) }})
			case sub == "trees" && !corrupt && snap != nil && !owned[e.Name()]:
				out = append(out, Finding{File: rel, OK: true, What: fmt.Sprintf("%s, of no resource in the inventory (unused)", plural(x.Len(), "entry"))})
			default:
				out = append(out, Finding{File: rel, OK: true, What: plural(x.Len(), "entry")})
			}
		}
	}
	for _, sub := range []string{"", "trees", "cache"} {
		dir := d.Sub(sub)
		// A live writer's temp file (the agent's, writing now) is no finding.
		for _, name := range dir.abandoned() {
			out = append(out, Finding{File: path.Join(sub, name), What: "a temp file left by an interrupted write", Repairable: true,
				Fix: "delete it", repair: func() error { return dir.Remove(name) }})
		}
	}
	return out
}

// Repair carries out the repairable fixes among findings, returning what
// it did; each error names the file.
func (d Dir) Repair(findings []Finding) ([]Finding, error) {
	var done []Finding
	var errs []error
	for _, f := range findings {
		if f.OK || !f.Repairable || f.repair == nil {
			continue
		}
		if err := f.repair(); err != nil {
			errs = append(errs, fmt.Errorf("repair %s: %w", f.File, err))
			continue
		}
		done = append(done, f)
	}
	return done, errors.Join(errs...)
}

func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	if strings.HasSuffix(thing, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(thing, "y"))
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// removeIndex deletes an index, its log and the note of its check.
func removeIndex(p File) error {
	err := p.dir.Remove(p.name)
	for _, suffix := range []string{logSuffix, checkedSuffix} {
		if err := p.dir.Remove(p.name + suffix); err != nil {
			return err
		}
	}
	return err
}
