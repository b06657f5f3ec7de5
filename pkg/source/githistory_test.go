package source_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// TestHistoryLastChange finds the commit that last changed a path from the
// cache alone: exact through a whole history, a mode change counted, a
// path gone counted, bounded by its limit, and "at or before" at the edge
// of a shallow cache; a revision the cache lacks is ErrNotCached.
func TestHistoryLastChange(t *testing.T) {
	repo := gittest.NewRepo(t)
	one := repo.Commit("one", map[string]*string{"m.yaml": gittest.S("a\n"), "kb/x": gittest.S("x\n"), "kb/y": gittest.S("y\n")})
	two := repo.Commit("two", map[string]*string{"kb/x": gittest.S("x2\n")})
	if err := os.Chmod(filepath.Join(repo.Dir, "kb/y"), 0o755); err != nil {
		t.Fatal(err)
	}
	three := repo.Commit("three: kb/y executable", nil)
	four := repo.Commit("four", map[string]*string{"other": gittest.S("o\n"), "gone": gittest.S("g\n")})
	five := repo.Commit("five", map[string]*string{"other": gittest.S("o2\n"), "gone": nil})
	url, _ := repo.Daemon(t)

	// A whole history: --commit fetches the branch at full depth.
	full := newGit(t, url)
	full.Commit = five
	co, err := full.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	co.Close()
	h, err := source.OpenHistory(full.Cache, url, "main@sha1:"+five)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, c := range []struct {
		path  string
		limit int
		want  string
		exact bool
	}{
		{"m.yaml", 100, one, true},
		{"kb/x", 100, two, true},
		{"kb/y", 100, three, true},
		{"kb", 100, three, true},
		{"/kb/x", 100, two, true},
		{"gone", 100, five, true},
		{"never", 100, one, true}, // absent all along: the root commit
		{"m.yaml", 2, four, false},
	} {
		got, err := h.LastChange(c.path, c.limit)
		if err != nil || got.Hash != c.want || got.Exact != c.exact {
			t.Errorf("LastChange(%q, %d) = %s exact %v, %v; want %s exact %v", c.path, c.limit, got.Hash, got.Exact, err, c.want, c.exact)
		}
	}
	// One walk for many paths answers as one walk each.
	paths := []string{"m.yaml", "kb/x", "kb/y", "kb", "gone", "never", "other"}
	all, err := h.LastChanges(paths, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range paths {
		if one, err := h.LastChange(p, 100); err != nil || one != all[i] {
			t.Errorf("LastChanges for %s: %+v, LastChange: %+v, %v", p, all[i], one, err)
		}
	}
	got, _ := h.LastChange("kb/x", 100)
	if got.Subject != "two" || got.Author == "" || got.Time.IsZero() || got.Walked != 4 {
		t.Errorf("the change's commit: %+v", got)
	}
	tree, err := h.Tree()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := fs.ReadFile(tree, "kb/x"); err != nil || string(b) != "x2\n" {
		t.Errorf("tree: %q %v", b, err)
	}
	tree.Close()

	// A shallow cache holds the head alone: m.yaml changed at or before it.
	shallow := newGit(t, url)
	if co, err = shallow.Fetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	co.Close()
	hs, err := source.OpenHistory(shallow.Cache, url, "main@sha1:"+five)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	if got, err := hs.LastChange("m.yaml", 100); err != nil || got.Hash != five || got.Exact {
		t.Errorf("shallow: %s exact %v, %v; want %s, not exact", got.Hash, got.Exact, err, five)
	}
	if _, err := source.OpenHistory(shallow.Cache, url, "main@sha1:"+one); !errors.Is(err, source.ErrNotCached) {
		t.Errorf("a commit the cache lacks: %v", err)
	}
	if _, err := source.OpenHistory(state.At(t.TempDir()), url, "main@sha1:"+five); !errors.Is(err, source.ErrNotCached) {
		t.Errorf("no cache: %v", err)
	}
}
