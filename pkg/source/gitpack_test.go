package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// similarFiles makes n files of a few KB that differ a little, so that git
// stores most of them as deltas.
func similarFiles(n int, seed uint64) map[string]*string {
	rng := rand.New(rand.NewPCG(seed, 1))
	var base strings.Builder
	for i := range 200 {
		fmt.Fprintf(&base, "line %d of the shared text %d\n", i, rng.IntN(1000))
	}
	files := map[string]*string{}
	for i := range n {
		s := fmt.Sprintf("file %d\n%s", i, base.String())
		files[fmt.Sprintf("d%d/f%d.txt", i%7, i)] = &s
	}
	return files
}

func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPackIndexAgreesWithGit fetches a pack full of deltas, then a thin pack
// of one change on top, and has git check the cache (pack, index, loose
// objects) and the files read back.
func TestPackIndexAgreesWithGit(t *testing.T) {
	repo := gittest.NewRepo(t)
	files := similarFiles(300, 1)
	// By commit: the first fetch is a full one, not shallow, and git
	// daemon uses what the cache holds as delta bases only then.
	g := &Git{Branch: "main", Commit: repo.Commit("tree", files), Cache: state.At(t.TempDir()), Timeout: 20 * time.Second}
	g.URL, _ = repo.Daemon(t)
	check := func(files map[string]*string) {
		t.Helper()
		co, err := g.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer co.Close()
		for name, want := range files {
			got, err := fs.ReadFile(co.Tree, name)
			if err != nil || string(got) != *want {
				t.Fatalf("%s: %q, %v; want %d bytes", name, got, err, len(*want))
			}
		}
		gitOut(t, "--git-dir", g.cacheDir().Path(), "fsck", "--full", "--strict")
	}
	check(files)
	idx, _ := filepath.Glob(filepath.Join(g.cacheDir().Path(), "objects", "pack", "pack-*.idx"))
	if len(idx) != 1 {
		t.Fatalf("packs: %v", idx)
	}
	if v := gitOut(t, "verify-pack", "-v", idx[0]); !strings.Contains(v, "chain length = 1") {
		t.Fatalf("the pack holds no deltas, so this test tests nothing:\n%s", v)
	}

	// One line more in one file: git daemon sends a thin pack, the new blob
	// a delta on the one the cache holds.
	changed := *files["d0/f0.txt"] + "one more line\n"
	files["d0/f0.txt"] = &changed
	g.Commit = repo.Commit("change", map[string]*string{"d0/f0.txt": &changed})
	check(files)
}

// TestThinPack stores a thin pack, deltas on objects of an earlier pack:
// their bases are appended to it, and git finds all in order.
func TestThinPack(t *testing.T) {
	repo := gittest.NewRepo(t)
	files := similarFiles(20, 3)
	repo.Commit("tree", files)
	dir := t.TempDir()
	if err := writePack(dir, packOf(t, repo, "HEAD"), 1<<20); err != nil {
		t.Fatal(err)
	}
	changed := *files["d0/f0.txt"] + "one more line\n"
	head := repo.Commit("change", map[string]*string{"d0/f0.txt": &changed})
	thin := packOf(t, repo, "--thin", "HEAD", "^HEAD~1")
	if err := writePack(dir, thin, 100); err != nil {
		t.Fatal(err)
	}
	gitOut(t, "--git-dir", dir, "fsck", "--full", "--strict", head)
	if got := gitOut(t, "--git-dir", dir, "show", head+":d0/f0.txt"); got != changed {
		t.Fatalf("d0/f0.txt reads %q", got)
	}

	// The same pack without the earlier one: its delta base is nowhere (and
	// so it was thin).
	err := writePack(t.TempDir(), thin, 100)
	if !errors.Is(err, packfile.ErrReferenceDeltaNotFound) {
		t.Fatalf("a thin pack without its base: %v", err)
	}
}

// packOf has git pack the objects of revs, as a server would send them.
func packOf(t *testing.T, repo *gittest.Repo, revs ...string) []byte {
	t.Helper()
	args := []string{"-C", repo.Dir, "pack-objects", "--stdout", "--revs", "--delta-base-offset"}
	if revs[0] == "--thin" {
		args, revs = append(args, revs[0]), revs[1:]
	}
	cmd := exec.Command("git", args...)
	cmd.Stdin = strings.NewReader(strings.Join(revs, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writePack(dir string, pack []byte, chunk int) error {
	s, _, err := openCache(state.At(dir))
	if err != nil {
		return err
	}
	packs, err := openPacks(state.At(dir))
	if err != nil {
		return err
	}
	defer packs.release()
	store := &packStore{Storage: s.storage, dir: state.At(dir), packs: packs}
	defer store.close()
	w, err := store.PackfileWriter()
	if err != nil {
		return err
	}
	for len(pack) > 0 {
		n := min(chunk, len(pack))
		if _, err := w.Write(pack[:n]); err != nil {
			w.Close()
			return err
		}
		pack = pack[n:]
	}
	return w.Close()
}

// TestPackWriterRejectsDamage feeds the pack writer a good pack in small
// writes, then damaged copies: each is refused and leaves no pack behind.
func TestPackWriterRejectsDamage(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("tree", similarFiles(50, 2))
	pack := packOf(t, repo, "HEAD")

	dir := t.TempDir()
	if err := writePack(dir, pack, 1000); err != nil {
		t.Fatal(err)
	}
	c, _, err := openCache(state.At(dir))
	if err != nil {
		t.Fatal(err)
	}
	head := plumbing.NewHash(repo.Head())
	if _, err := c.storage.EncodedObject(plumbing.CommitObject, head); err != nil {
		t.Fatalf("the commit is not readable from the cache: %v", err)
	}
	gitOut(t, "--git-dir", dir, "fsck", "--full", "--strict", head.String())

	for name, damage := range map[string]func([]byte) []byte{
		"truncated":      func(p []byte) []byte { return p[:len(p)/2] },
		"bit flipped":    func(p []byte) []byte { p[len(p)/2] ^= 0x10; return p },
		"trailer":        func(p []byte) []byte { p[len(p)-1] ^= 1; return p },
		"trailing bytes": func(p []byte) []byte { return append(p, "extra"...) },
		"no signature":   func(p []byte) []byte { copy(p, "KCAP"); return p },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			err := writePack(dir, damage(bytes.Clone(pack)), 4096)
			if err == nil {
				t.Fatal("a damaged pack was accepted")
			}
			left, _ := os.ReadDir(filepath.Join(dir, "objects", "pack"))
			if len(left) != 0 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
}

// TestPackIndexBounded indexes packs with every bound of the indexer
// small: records sorted in runs of 7, a base cache of a few objects (bases
// made again from the file), and a pack whose deltas name their bases by
// ID (REF_DELTA, as a server without ofs-delta sends), made once the rest
// is indexed. git checks the index, and every object reads back.
func TestPackIndexBounded(t *testing.T) {
	defer func(runs, cache int) { runRecords, indexBaseCache = runs, cache }(runRecords, indexBaseCache)
	runRecords, indexBaseCache = 7, 16<<10
	repo := gittest.NewRepo(t)
	files := similarFiles(60, 4)
	// Versions of a file, each one line changed from the one before: git
	// chains them.
	rng := rand.New(rand.NewPCG(5, 5))
	lines := make([]string, 300)
	for i := range lines {
		lines[i] = fmt.Sprintf("line %d: %d\n", i, rng.Int())
	}
	for v := range 30 {
		lines[rng.IntN(len(lines))] = fmt.Sprintf("changed in version %d\n", v)
		files[fmt.Sprintf("versions/v%02d.txt", v)] = gittest.S(strings.Join(lines, ""))
	}
	head := repo.Commit("tree", files)
	for name, pack := range map[string][]byte{
		"ofs": packOf(t, repo, "HEAD"),
		"ref": refPackOf(t, repo, "HEAD"),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := writePack(dir, pack, 999); err != nil {
				t.Fatal(err)
			}
			idx, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.idx"))
			v := gitOut(t, "verify-pack", "-v", idx[0])
			if !strings.Contains(v, "chain length = 2") {
				t.Fatalf("no delta chains, so this test tests nothing:\n%s", v)
			}
			gitOut(t, "--git-dir", dir, "fsck", "--full", "--strict", head)
			checkPacks(t, dir)
		})
	}
}

// refPackOf packs like packOf, its deltas on bases named by ID.
func refPackOf(t *testing.T, repo *gittest.Repo, revs ...string) []byte {
	t.Helper()
	cmd := exec.Command("git", "-C", repo.Dir, "pack-objects", "--stdout", "--revs")
	cmd.Stdin = strings.NewReader(strings.Join(revs, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestIndexWriteRead writes a pack index of records spread over runs,
// with offsets past 2 GiB (the 64-bit table) and IDs that share their
// first 8 bytes (a lookup's block spans samples), and finds each one
// back, and none that is not there.
func TestIndexWriteRead(t *testing.T) {
	defer func(runs int) { runRecords = runs }(runRecords)
	runRecords = 50
	rng := rand.New(rand.NewPCG(3, 3))
	dir := t.TempDir()
	var r recordSorter
	r.scratch = func() (*os.File, error) { return os.CreateTemp(dir, "run") }
	defer r.close()
	want := map[plumbing.Hash]int64{}
	var twins plumbing.Hash
	for i := range 1000 {
		var id plumbing.Hash
		for j := range id {
			id[j] = byte(rng.IntN(256))
		}
		if i%100 < 70 && i >= 100 {
			// 70 IDs in a row alike in their first 8 bytes: more than two
			// samples' worth.
			copy(id[:8], twins[:8])
		}
		if i == 99 {
			twins = id
		}
		off := int64(12 + i*100)
		if i%3 == 0 {
			off = 3<<30 + int64(i) // past 2 GiB
		}
		if i%7 == 0 {
			off = 5<<32 + int64(i)
		}
		want[id] = off
		if err := r.add(id, off, uint32(i)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(dir, "pack.idx"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := r.writeIndex(f, plumbing.Hash{1}); err != nil {
		t.Fatal(err)
	}
	p := &packFile{name: "pack", idx: f, trailer: 1 << 40}
	if err := p.readIndex(func(what string) error { return errors.New(what) }); err != nil {
		t.Fatal(err)
	}
	if p.n != len(want) || len(r.runs) < 10 {
		t.Fatalf("%d objects in %d runs, want %d in many", p.n, len(r.runs), len(want))
	}
	for id, off := range want {
		got, ok, err := p.lookup(id)
		if err != nil || !ok || got != off {
			t.Fatalf("%s at %d, %v, %v; want %d", id, got, ok, err, off)
		}
		id[19]++
		if _, ok, err := p.lookup(id); ok || err != nil {
			t.Fatalf("%s, not written, found: %v", id, err)
		}
	}
	// git reads the same offsets and CRCs.
	cmd := exec.Command("git", "show-index")
	cmd.Stdin, _ = os.Open(f.Name())
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, l := range lines {
		var off int64
		var id string
		var crc uint32
		if _, err := fmt.Sscanf(l, "%d %s (%x)", &off, &id, &crc); err != nil || want[plumbing.NewHash(id)] != off {
			t.Fatalf("git show-index: %q (%v), want offset %d", l, err, want[plumbing.NewHash(id)])
		}
	}
	if len(lines) != len(want) {
		t.Fatalf("git show-index lists %d objects, want %d", len(lines), len(want))
	}
}
