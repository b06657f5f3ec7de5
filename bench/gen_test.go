//go:build linux

package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenerate makes a small data set and checks its shape, that the
// repository holds exactly the checkout, and that the same seed makes the
// same tree.
func TestGenerate(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	const n = 3000
	dir := filepath.Join(t.TempDir(), "data")
	st, err := generate(dir, n, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !generated(dir) {
		t.Fatal("no READY after generate")
	}
	if st.files != n {
		t.Errorf("generate says %d files, want %d", st.files, n)
	}
	kb := filepath.Join(dir, "tree", "kb")
	perDir := map[string]int{}
	files := map[string][]byte{}
	filepath.WalkDir(kb, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(filepath.Join(dir, "tree"), p)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			files[rel] = b
			perDir[filepath.Dir(rel)]++
		}
		return nil
	})
	if len(files) != n {
		t.Fatalf("kb/ holds %d files, want %d", len(files), n)
	}
	if got := fileCount(kb); got != n {
		t.Errorf("fileCount from INFO = %d, want %d", got, n)
	}
	// Leaves (directories of many files) 3 to 5 deep, about 50 files each.
	leaves, inLeaves := 0, 0
	for d, k := range perDir {
		depth := strings.Count(d, "/") // kb/a/b/c: 3
		if k < 10 {
			continue // a directory between, with an index or two
		}
		if depth < genMinDepth || depth > genMaxDepth {
			t.Errorf("%s holds %d files at depth %d, not %d to %d", d, k, depth, genMinDepth, genMaxDepth)
		}
		leaves++
		inLeaves += k
	}
	if avg := inLeaves / max(leaves, 1); avg < 30 || avg > 80 {
		t.Errorf("%d files a leaf directory on average, want about %d", avg, genPerDir)
	}

	// The repository's one commit holds the checkout, byte for byte.
	bare := filepath.Join(dir, "repo.git")
	out, err := exec.Command("git", "--git-dir", bare, "ls-tree", "-r", "--name-only", "main").Output()
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(string(out))
	if len(names) != n+2 {
		t.Errorf("the commit holds %d files, want %d and kb.yaml, .cortexignore", len(names), n)
	}
	repo := &bareRepo{dir: bare}
	for _, name := range []string{"kb.yaml", ".cortexignore", names[len(names)/2]} {
		want, err := os.ReadFile(filepath.Join(dir, "tree", name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := repo.read(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s in the repository differs from the checkout's", name)
		}
	}

	// The same seed, the same tree; a data set is never made twice.
	again := filepath.Join(t.TempDir(), "again")
	if _, err := generate(again, n, 7); err != nil {
		t.Fatal(err)
	}
	mid, err := middleFile(kb)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(again, "tree", "kb", mid))
	if err != nil || !bytes.Equal(b, files[filepath.Join("kb", mid)]) {
		t.Errorf("kb/%s differs between two generations with the same seed (%v)", mid, err)
	}
	if _, err := generate(dir, n, 7); err == nil {
		t.Error("generate made a data set over one that was READY")
	}
}

// TestCommit checks that a commit on a borrowed repository changes the
// file on main there, and not in the repository it borrows from.
func TestCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := filepath.Join(t.TempDir(), "data")
	if _, err := generate(dir, 200, 1); err != nil {
		t.Fatal(err)
	}
	from := &bareRepo{dir: filepath.Join(dir, "repo.git")}
	repo, err := newBareShared(from.dir, filepath.Join(t.TempDir(), "served.git"))
	if err != nil {
		t.Fatal(err)
	}
	mid, err := middleFile(filepath.Join(dir, "tree", "kb"))
	if err != nil {
		t.Fatal(err)
	}
	rel := filepath.Join("kb", mid)
	old, err := repo.read(rel)
	if err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Clone(old), "changed\n"...)
	if err := repo.commit(rel, want); err != nil {
		t.Fatal(err)
	}
	if got, err := repo.read(rel); err != nil || !bytes.Equal(got, want) {
		t.Errorf("after the commit %s holds %q (%v), want %q", rel, got, err, want)
	}
	if got, err := from.read(rel); err != nil || !bytes.Equal(got, old) {
		t.Errorf("the commit changed %s in the repository borrowed from (%v)", rel, err)
	}
	out, err := exec.Command("git", "--git-dir", repo.dir, "rev-list", "--count", "main").Output()
	if err != nil || strings.TrimSpace(string(out)) != "2" {
		t.Errorf("main has %s commits (%v), want 2", out, err)
	}
}
