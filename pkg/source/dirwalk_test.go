package source

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
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
	g := &Git{Branch: "main", CacheDir: t.TempDir(), Timeout: 20 * time.Second}
	url, stop := repo.Daemon(t)
	defer stop()
	g.URL = url
	fromGit, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer fromGit.Close()
	fromDir, err := (&Dir{Dir: repo.Dir, CacheDir: t.TempDir()}).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer fromDir.Close()
	walk := func(co *Checkout) (entries, keys []string) {
		err := co.Tree.Walk("tree", func(e Entry) error {
			s, key := fmt.Sprintf("%s %v", e.Path, e.Mode.Type()), e.Path
			switch {
			case e.Mode.IsRegular():
				id, err := e.ContentID()
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
