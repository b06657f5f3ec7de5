package index

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Check is state check's look at the indexes in the state dir d: the
// tree indexes (trees/), each named for a resource of snap's inventory,
// and the source stat caches (cache/); snap is nil when it cannot be
// read. A damaged one is repaired by deleting it; its temp files are the
// state dir's (state.Dir.Check).
func Check(d state.Dir, snap *state.Snapshot) []state.Finding {
	var out []state.Finding
	owned := map[string]bool{}
	if snap != nil {
		for _, e := range snap.Inventory {
			owned[strings.ReplaceAll(e.ID, "/", ".")+".idx"] = true
		}
	}
	for _, sub := range []string{"trees", "cache"} {
		entries, err := d.Sub(sub).ReadDir()
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			out = append(out, state.Finding{File: sub, What: err.Error(), Fix: "repair cannot fix this: see the message"})
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".idx") || hostfs.IsTemp(e.Name()) {
				continue // a temp file (an index's, cut short by a kill) is listed by state.Dir.Check
			}
			rel := path.Join(sub, e.Name())
			p := d.File(rel)
			x, err := load(p, trust{whole: true}) // whatever a note or an earlier load says
			switch {
			case err != nil && !errors.Is(err, ErrCorrupt):
				out = append(out, state.Finding{File: rel, What: err.Error(), Fix: "repair cannot fix this: see the message"})
			case err != nil && sub == "trees":
				out = append(out, state.Finding{File: rel, What: err.Error(), Repairable: true,
					Fix:    "delete it: the next sync re-hashes the tree and adopts the files that match Git; files removed from Git meanwhile are no longer known as cortex-sync's and stay on the host",
					Repair: func() error { return remove(p) }})
			case err != nil:
				out = append(out, state.Finding{File: rel, What: err.Error(), Repairable: true,
					Fix:    "delete it: it is a cache of the source's file hashes, rebuilt by the next run",
					Repair: func() error { return remove(p) }})
			case sub == "trees" && snap != nil && !owned[e.Name()]:
				out = append(out, state.Finding{File: rel, OK: true, What: fmt.Sprintf("%s, of no resource in the inventory (unused)", plural(x.Len(), "entry"))})
			default:
				out = append(out, state.Finding{File: rel, OK: true, What: plural(x.Len(), "entry")})
			}
		}
	}
	return out
}

// remove deletes an index, its log and the note of its check.
func remove(p state.File) error {
	err := p.Dir().Remove(p.Name())
	for _, suffix := range []string{logSuffix, checkedSuffix} {
		if err := p.Dir().Remove(p.Name() + suffix); err != nil {
			return err
		}
	}
	return err
}

// plural is n things: "1 entry", "2 entries".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	if strings.HasSuffix(thing, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(thing, "y"))
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
