package source

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/fsclock"
	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// A directory checkout walks as the Git tree of the same commit does: the
// same entries, with the same content IDs, in the same order (Git's: a
// directory's name as if it ended in "/"), which is also the order of
// the paths in a tree index.
func TestDirWalksAsGitDoes(t *testing.T) {
	repo := gittest.NewRepo(t)
	files := map[string]*string{}
	for _, p := range []string{"a.txt", "a/b", "a/b.go", "a/b0", "a/b/c", "a0", "a-b/c", "A", "a!", "z/z/z"} {
		files["tree/"+p] = gittest.S("content of " + p)
	}
	// "a/b" is a directory: the file of that name is dropped.
	delete(files, "tree/a/b")
	repo.Commit("tree", files)
	g := &Git{Branch: "main", Cache: state.At(t.TempDir()), Timeout: 20 * time.Second}
	url, stop := repo.Daemon(t)
	defer stop()
	g.URL = url
	fromGit, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer fromGit.Close()
	fromDir, err := (&Dir{Dir: repo.Dir, Cache: state.At(t.TempDir())}).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer fromDir.Close()
	walk := func(co *Checkout) (entries, keys []string) {
		err := co.Tree.Walk("tree", func(e Entry) error {
			s, key := fmt.Sprintf("%s %v", e.Path, e.Mode.Type()), e.Path
			switch {
			case e.Mode.IsRegular():
				id, err := e.ID()
				if err != nil {
					return err
				}
				s += " " + id
			case e.Mode.IsDir():
				key += "/"
			}
			entries, keys = append(entries, s), append(keys, key)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return entries, keys
	}
	g1, _ := walk(fromGit)
	d1, keys := walk(fromDir)
	if !slices.Equal(g1, d1) {
		t.Errorf("the directory walks\n%q\nthe Git tree\n%q", d1, g1)
	}
	if !slices.IsSorted(keys) {
		t.Errorf("not in path order: %q", keys)
	}
}

// A directory's stat cache is read a directory at a time as the walk
// lists it: asking a walked file's content ID while its stat holds costs
// nothing more, and a file whose stat moved is hashed afresh.
func TestDirCachedContentIDs(t *testing.T) {
	repo, cache := t.TempDir(), t.TempDir()
	for i := range 20 {
		writeFile(t, filepath.Join(repo, "tree", fmt.Sprintf("d%d", i%3), fmt.Sprintf("f%d", i)), fmt.Sprintf("content %d", i))
	}
	// The cache saved in the same tick of the filesystem's clock as a file
	// was written holds the file as racily clean, hashed again each time:
	// wait for the clock to move on.
	fsclock.WaitPast(t, repo, filepath.Join(repo, "tree", "d1", "f19"))
	walk := func(check func(e Entry, id string)) map[string]string {
		co, err := (&Dir{Dir: repo, Cache: state.At(cache)}).Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer co.Close()
		ids := map[string]string{}
		err = co.Tree.Walk("tree", func(e Entry) error {
			if !e.Mode.IsRegular() {
				return nil
			}
			id, err := e.ID()
			ids[e.Path] = id
			if check != nil {
				check(e, id)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	first := walk(nil) // hashes every file, and saves the cache
	for p, id := range first {
		if want := ContentDigest(fmt.Appendf(nil, "content %s", strings.TrimPrefix(path.Base(p), "f"))); id != want {
			t.Fatalf("%s: %s, want %s", p, id, want)
		}
	}
	walk(func(e Entry, id string) {
		if allocs := testing.AllocsPerRun(10, func() { e.ID() }); allocs != 0 {
			t.Errorf("%s: the cached content ID took %.0f allocations, want none", e.Path, allocs)
		}
	})
	writeFile(t, filepath.Join(repo, "tree", "d1", "f4"), "changed")
	again := walk(nil)
	if want := ContentDigest([]byte("changed")); again["d1/f4"] != want {
		t.Errorf("a changed file: %s, want %s", again["d1/f4"], want)
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A walk that leaves files' stats for later gives what Walk gives once
// each entry is settled (from another goroutine, as the mirror planner
// does), and holds no directory open after: those its files need stay
// open until each has settled, or until the tree is closed for files that
// never were; one that settles after the close is refused. A file
// replaced by a directory before it settles is an error, not a file.
func TestDirWalkStatLater(t *testing.T) {
	repo := t.TempDir()
	for i := range 30 {
		writeFile(t, filepath.Join(repo, "tree", fmt.Sprintf("d%d", i%4), fmt.Sprintf("e%d", i%3), fmt.Sprintf("f%d", i)), strings.Repeat("x", i))
	}
	if err := os.Chmod(filepath.Join(repo, "tree", "d1", "e1", "f13"), 0o755); err != nil {
		t.Fatal(err)
	}
	co, err := (&Dir{Dir: repo, Cache: state.At(t.TempDir())}).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	tree := co.Tree.(*dirTree)
	var want []string
	if err := tree.Walk("tree", func(e Entry) error {
		want = append(want, fmt.Sprintf("%s %v %d", e.Path, e.Mode, e.Size))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	held := func() int {
		tree.mu.Lock()
		defer tree.mu.Unlock()
		return len(tree.held)
	}
	var later []Entry
	if err := tree.WalkStatLater("tree", func(e Entry) error {
		later = append(later, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if held() == 0 {
		t.Fatal("no directory held for the files to settle")
	}
	got := make([]string, len(later))
	done := make(chan error)
	go func() {
		for i := range later {
			if err := later[i].Settle(); err != nil {
				done <- err
				return
			}
			got[i] = fmt.Sprintf("%s %v %d", later[i].Path, later[i].Mode, later[i].Size)
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("settled:\n%q\nwalked:\n%q", got, want)
	}
	if n := held(); n != 0 {
		t.Errorf("%d directories still held once every file settled", n)
	}
	// Never settled: the tree's Close closes what they held.
	later = later[:0]
	if err := tree.WalkStatLater("tree", func(e Entry) error {
		later = append(later, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	replaced := filepath.Join(repo, "tree", "d0", "e0", "f0")
	if err := os.Remove(replaced); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(replaced, 0o755); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(later, func(e Entry) bool { return e.Path == "d0/e0/f0" })
	if err := later[i].Settle(); err == nil || !strings.Contains(err.Error(), "no longer a regular file") {
		t.Errorf("a file replaced by a directory settled: %v, %v", later[i].Mode, err)
	}
	if err := co.Close(); err != nil {
		t.Fatal(err)
	}
	if n := held(); n != 0 {
		t.Errorf("%d directories still held once the tree closed", n)
	}
	// What settles after the tree closed is refused, not stated through a
	// descriptor that may name another directory by then.
	j := slices.IndexFunc(later, func(e Entry) bool { return e.Path == "d1/e1/f13" })
	if err := later[j].Settle(); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("a file settled after the tree closed: %v, %v", later[j].Mode, err)
	}
}

// A walk reuses the files of a directory whose entries were all released
// for the next directory it lists, but never those of an entry kept, nor
// of one released twice while another is still in use: what a kept (or
// unreleased) entry reads stays its own file's.
func TestDirWalkReleaseKeep(t *testing.T) {
	repo := t.TempDir()
	for i := range 12 {
		writeFile(t, filepath.Join(repo, "one", fmt.Sprintf("f%02d", i)), fmt.Sprintf("one %d", i))
		writeFile(t, filepath.Join(repo, "two", fmt.Sprintf("g%02d", i)), fmt.Sprintf("two %d, longer", i))
	}
	co, err := (&Dir{Dir: repo, Cache: state.At(t.TempDir())}).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	tree := co.Tree.(*dirTree)
	walk := func(dir string) ([]Entry, []string) {
		var es []Entry
		if err := tree.WalkStatLater(dir, func(e Entry) error {
			es = append(es, e)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(es))
		for i := range es {
			if err := es[i].Settle(); err != nil {
				t.Fatal(err)
			}
			if ids[i], err = es[i].ID(); err != nil {
				t.Fatal(err)
			}
		}
		return es, ids
	}
	idsOf := func(es []Entry) []string {
		ids := make([]string, len(es))
		for i := range es {
			var err error
			if ids[i], err = es[i].ID(); err != nil {
				t.Fatal(err)
			}
		}
		return ids
	}
	for _, tc := range []struct {
		name    string
		release func(es []Entry) []Entry // returns the entries still to be good
	}{
		{"kept", func(es []Entry) []Entry {
			es[3].Keep()
			for i := range es {
				es[i].Release()
			}
			return es[3:4]
		}},
		{"released twice", func(es []Entry) []Entry {
			for i := range es[1:] {
				es[1+i].Release()
				es[1+i].Release()
			}
			return es[:1]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, ids := walk("one")
			good := tc.release(es)
			want := idsOf(good)
			// Walks of another directory of as many files take what
			// was given back.
			for range 4 {
				others, _ := walk("two")
				for i := range others {
					others[i].Release()
				}
			}
			if got := idsOf(good); !slices.Equal(got, want) || !slices.Contains(ids, got[0]) {
				t.Errorf("entries in use read %q, want %q", got, want)
			}
		})
	}
	// The contract the reuse keeps: the files of a directory released
	// whole go back, and are a later walk's. (Were they not reused at
	// all, the cases above would prove nothing.) The pool drops a
	// quarter of what it is given under the race detector: a few rounds.
	released := map[*dirFile]bool{}
	reused := false
	for range 20 {
		es, _ := walk("one")
		for i := range es {
			f := es[i].File.(*dirFile)
			reused = reused || released[f]
			released[f] = true
			es[i].Release()
		}
	}
	if !reused {
		t.Error("the files of a directory released whole were not reused")
	}
}
