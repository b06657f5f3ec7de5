package state

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Finding is one thing state check looked at.
type Finding struct {
	File string // relative to the state dir
	OK   bool
	What string // what was found
	// Fix is what repair does (Repairable) or what the user must do.
	Fix        string
	Repairable bool
	// Repair does the fix (Repairable): what Dir.Repair runs.
	Repair func() error `json:"-"`
}

// A CheckFunc checks the files another package keeps in the state dir
// (the tree indexes and source stat caches: index.Check), given the
// snapshot, nil when it cannot be read.
type CheckFunc func(d Dir, snap *Snapshot) []Finding

// Check verifies the state dir: the snapshot, its rollback mark, what
// each of parts checks, and temp files left by a killed write (never one
// whose writer still runs: hostfs.Abandoned).
func (d Dir) Check(parts ...CheckFunc) []Finding {
	var out []Finding
	snap, err := d.Load()
	switch {
	case err == nil && snap.Serial == 0:
		out = append(out, Finding{File: "state.json", OK: true, What: "no snapshot yet: nothing applied"})
	case err == nil:
		out = append(out, Finding{File: "state.json", OK: true, What: fmt.Sprintf("serial %d, lineage %s, %s, revision %s", snap.Serial, snap.Lineage, plural(len(snap.Inventory), "resource"), orNone(snap.Revision))})
	case errors.Is(err, ErrCorruptSnapshot):
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
	for _, check := range parts {
		out = append(out, check(d, snap)...)
	}
	for _, sub := range []string{"", "trees", "cache"} {
		dir := d.Sub(sub)
		// A live writer's temp file (the agent's, writing now) is no finding.
		for _, name := range dir.abandoned() {
			out = append(out, Finding{File: path.Join(sub, name), What: "a temp file left by an interrupted write", Repairable: true,
				Fix: "delete it", Repair: func() error { return dir.Remove(name) }})
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
		if f.OK || !f.Repairable || f.Repair == nil {
			continue
		}
		if err := f.Repair(); err != nil {
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
