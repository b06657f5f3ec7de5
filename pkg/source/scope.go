package source

import (
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// WalkScope walks what Walk(dir) would, narrowed to scope (slash paths
// below dir, each with everything below it) and the directories on the
// way: parents before children, in the order Walk keeps, so a narrowed
// plan of a tree of 45,000 files reads the trees on a few paths only. A
// scope path missing from the tree is left out (with the directories on
// its way that are there).
func WalkScope(t Tree, dir string, scope []string, fn func(Entry) error) error {
	scope = slices.Clone(scope)
	slices.SortFunc(scope, ByComponent)
	scope = slices.CompactFunc(scope, func(a, b string) bool { return a == b })
	// What is below another scope path is walked with it.
	kept := scope[:0]
	for _, s := range scope {
		if n := len(kept); n > 0 && strings.HasPrefix(s, kept[n-1]+"/") {
			continue
		}
		kept = append(kept, s)
	}
	emitted := map[string]bool{}
	for _, s := range kept {
		parts := strings.Split(s, "/")
		for i := range parts {
			rel := strings.Join(parts[:i+1], "/")
			if emitted[rel] {
				continue
			}
			emitted[rel] = true
			e, err := entryAt(t, path.Join(dir, rel), rel)
			if errors.Is(err, fs.ErrNotExist) {
				break // nor anything below it
			}
			if err != nil {
				return err
			}
			if err := fn(e); err != nil {
				return err
			}
			if i < len(parts)-1 {
				if !e.Mode.IsDir() {
					break
				}
				continue
			}
			if e.Mode.IsDir() {
				err := t.Walk(path.Join(dir, rel), func(c Entry) error {
					c.Path = rel + "/" + c.Path
					return fn(c)
				})
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// entryAt is the entry of the tree at name, named rel.
func entryAt(t Tree, name, rel string) (Entry, error) {
	fi, err := fs.Lstat(t, name)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Path: rel, Mode: fi.Mode(), Size: fi.Size()}
	switch {
	case fi.Mode().IsRegular():
		e.ContentID = func() (string, error) { return t.ContentID(name) }
	case fi.Mode()&fs.ModeSymlink != 0:
		if e.Target, err = fs.ReadLink(t, name); err != nil {
			return Entry{}, err
		}
	}
	return e, nil
}

// ByComponent orders slash paths component by component, as a walk meets
// them: "a/b" before "a-c".
func ByComponent(a, b string) int {
	for {
		ha, ta, _ := strings.Cut(a, "/")
		hb, tb, _ := strings.Cut(b, "/")
		if c := strings.Compare(ha, hb); c != 0 || ta == "" && tb == "" {
			return c
		}
		if ta == "" {
			return -1
		}
		if tb == "" {
			return 1
		}
		a, b = ta, tb
	}
}
