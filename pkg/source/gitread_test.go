package source

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"golang.org/x/sync/errgroup"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// catAll is every object of a repository as git reads it: ID → type and
// content.
func catAll(t *testing.T, gitDir string) map[plumbing.Hash]struct {
	typ  string
	data []byte
} {
	t.Helper()
	cmd := exec.Command("git", "--git-dir", gitDir, "cat-file", "--batch-all-objects", "--batch")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git cat-file: %v", err)
	}
	all := map[plumbing.Hash]struct {
		typ  string
		data []byte
	}{}
	br := bufio.NewReader(bytes.NewReader(out))
	for {
		line, err := br.ReadString('\n')
		if err == io.EOF {
			return all
		}
		f := strings.Fields(line)
		if err != nil || len(f) != 3 {
			t.Fatalf("git cat-file: %q, %v", line, err)
		}
		n, _ := strconv.Atoi(f[2])
		data := make([]byte, n+1)
		if _, err := io.ReadFull(br, data); err != nil {
			t.Fatal(err)
		}
		all[plumbing.NewHash(f[0])] = struct {
			typ  string
			data []byte
		}{f[1], data[:n]}
	}
}

// checkPacks reads every object git sees in the cache at dir through the
// pack reader and compares.
func checkPacks(t *testing.T, dir string) {
	t.Helper()
	s, err := openPacks(state.At(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s.release()
	for h, want := range catAll(t, dir) {
		typ, got, err := s.read(h)
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		if typ.String() != want.typ || !bytes.Equal(got, want.data) {
			t.Fatalf("%s: a %s of %d bytes; git reads a %s of %d", h, typ, len(got), want.typ, len(want.data))
		}
	}
}

// TestPackReaderAgreesWithGit reads every object of packs full of delta
// chains, and of a thin pack fixed on top, and compares with git.
func TestPackReaderAgreesWithGit(t *testing.T) {
	repo := gittest.NewRepo(t)
	// Versions of a file, each one line changed from the one before: git
	// chains them, each a delta on its neighbour.
	rng := rand.New(rand.NewPCG(9, 9))
	lines := make([]string, 300)
	for i := range lines {
		lines[i] = fmt.Sprintf("line %d: %d\n", i, rng.Int())
	}
	files := map[string]*string{}
	for v := range 40 {
		lines[rng.IntN(len(lines))] = fmt.Sprintf("changed in version %d\n", v)
		files[fmt.Sprintf("versions/v%02d.txt", v)] = gittest.S(strings.Join(lines, ""))
	}
	for name, s := range similarFiles(100, 4) {
		files[name] = s
	}
	repo.Commit("tree", files)
	dir := t.TempDir()
	if err := writePack(dir, packOf(t, repo, "HEAD"), 1<<16); err != nil {
		t.Fatal(err)
	}
	idx, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.idx"))
	if v := gitOut(t, "verify-pack", "-v", idx[0]); !strings.Contains(v, "chain length = 3") {
		t.Fatalf("no delta chains, so this test tests nothing:\n%s", v)
	}
	checkPacks(t, dir)

	changed := *files["versions/v10.txt"] + "one more line\n"
	repo.Commit("change", map[string]*string{"versions/v10.txt": &changed})
	thin := packOf(t, repo, "--thin", "HEAD", "^HEAD~1")
	if err := writePack(dir, thin, 100); err != nil {
		t.Fatal(err)
	}
	checkPacks(t, dir)
}

// TestPackReaderCorruptPack damages a cached pack: reading the damaged
// object fails naming it and the pack; a damaged index fails naming the
// index.
func TestPackReaderCorruptPack(t *testing.T) {
	repo := gittest.NewRepo(t)
	big := strings.Repeat("some content that zlib packs\n", 2000)
	head := repo.Commit("tree", map[string]*string{"big": &big, "small": gittest.S("small\n")})
	dir := t.TempDir()
	if err := writePack(dir, packOf(t, repo, "HEAD"), 1<<16); err != nil {
		t.Fatal(err)
	}
	blob := plumbing.NewHash(repo.Git("-C", repo.Dir, "rev-parse", head+":big"))
	s, err := openPacks(state.At(dir))
	if err != nil {
		t.Fatal(err)
	}
	p := s.packs[0]
	off, ok, err := p.lookup(blob)
	if err != nil || !ok {
		t.Fatalf("%s is not in the pack: %v", blob, err)
	}
	hd, err := s.header(p, off)
	if err != nil {
		t.Fatal(err)
	}
	s.release()

	packPath := p.f.Name()
	pack, err := os.ReadFile(packPath)
	if err != nil {
		t.Fatal(err)
	}
	pack[hd.data+8] ^= 0x55
	if err := os.WriteFile(packPath, pack, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = openPacks(state.At(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s.release()
	_, _, err = s.read(blob)
	if err == nil || !strings.Contains(err.Error(), blob.String()) || !strings.Contains(err.Error(), p.name) {
		t.Fatalf("a damaged object read: %v", err)
	}

	idxPath := strings.TrimSuffix(packPath, ".pack") + ".idx"
	if err := os.Truncate(idxPath, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := openPacks(state.At(dir)); err == nil || !strings.Contains(err.Error(), idxPath) {
		t.Fatalf("a truncated index: %v", err)
	}
}

// TestPackReaderDeltaErrors: a delta whose base is missing, and a delta
// that does not fit its base, fail plainly.
func TestPackReaderDeltaErrors(t *testing.T) {
	repo := gittest.NewRepo(t)
	files := similarFiles(20, 5)
	repo.Commit("tree", files)
	dir := t.TempDir()
	if err := writePack(dir, packOf(t, repo, "HEAD"), 1<<16); err != nil {
		t.Fatal(err)
	}
	s, err := openPacks(state.At(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s.release()
	p := s.packs[0]
	// Find a delta.
	found := false
	for i := range p.n {
		off, err := p.offset(i)
		if err != nil {
			t.Fatal(err)
		}
		hd, err := s.header(p, off)
		if err != nil || hd.typ != plumbing.OFSDeltaObject {
			continue
		}
		_, _, _, err = s.openAt(p, off, maxDeltaDepth+1)
		if err == nil || !errors.Is(err, packfile.ErrMalformedPackFile) {
			t.Fatalf("a chain past git's depth limit: %v", err)
		}
		found = true
		break
	}
	if !found {
		t.Fatal("no OFS_DELTA in the pack")
	}
	// A delta whose base offset points before the pack's first object.
	f, err := os.Create(filepath.Join(t.TempDir(), "pack"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b bytes.Buffer
	b.WriteString("PACK\x00\x00\x00\x02\x00\x00\x00\x01")
	writeObjectHeader(&b, plumbing.OFSDeltaObject, 3)
	b.WriteByte(100) // 100 bytes back: before the pack's header ends
	b.Write(make([]byte, 40))
	f.Write(b.Bytes())
	bad := &packFile{name: "pack", f: f, trailer: int64(b.Len()) - 20}
	if _, _, _, err := s.openAt(bad, 12, 0); err == nil || !strings.Contains(err.Error(), "no object at delta base offset") {
		t.Fatalf("a delta without its base: %v", err)
	}
}

// TestOpenTreeOutlivesNewPacks keeps a tree open across a fetch that
// installs a new pack: it still reads, and the packs' files are closed once
// nothing uses them.
func TestOpenTreeOutlivesNewPacks(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("one", map[string]*string{"a": gittest.S("one\n")})
	g := &Git{Branch: "main", Cache: state.At(t.TempDir()), Timeout: 20 * time.Second}
	g.URL, _ = repo.Daemon(t)
	before := openPackFiles(t)
	old, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	oldPacks := g.packs
	repo.Commit("two", map[string]*string{"a": gittest.S("two\n")})
	for range 3 { // polls: new commits, and none
		co, err := g.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, co, "a"); got != "two\n" {
			t.Fatalf("the new tree reads %q", got)
		}
		co.Close()
	}
	if oldPacks == g.packs {
		t.Fatal("the fetch kept the old packs")
	}
	if got := readFile(t, old, "a"); got != "one\n" {
		t.Fatalf("the old tree reads %q", got)
	}
	old.Close()
	old.Close() // twice is harmless
	if n := openPackFiles(t) - before; n != len(g.packs.packs) {
		t.Fatalf("%d pack files open, want the %d the cache holds", n, len(g.packs.packs))
	}
}

func readFile(t *testing.T, co *Checkout, name string) string {
	t.Helper()
	f, err := co.Tree.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// openPackFiles counts the process's open .pack files.
func openPackFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasSuffix(target, ".pack") {
			n++
		}
	}
	return n
}

// TestParallelBlobReads reads every file of a tree of deltas through
// Entry.Open on many goroutines at once, as a first sync does.
func TestParallelBlobReads(t *testing.T) {
	repo := gittest.NewRepo(t)
	files := similarFiles(400, 6)
	repo.Commit("tree", files)
	g := &Git{Branch: "main", Cache: state.At(t.TempDir()), Timeout: 20 * time.Second}
	g.URL, _ = repo.Daemon(t)
	co, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	var opens []func() (io.ReadCloser, error)
	var names []string
	err = co.Tree.Walk(".", func(e Entry) error {
		if e.Mode.IsRegular() {
			if e.Open == nil {
				return fmt.Errorf("%s: no Open", e.Path)
			}
			opens, names = append(opens, e.Open), append(names, e.Path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(files) {
		t.Fatalf("walked %d files, want %d", len(names), len(files))
	}
	var eg errgroup.Group
	eg.SetLimit(8)
	for range 3 {
		for i, open := range opens {
			eg.Go(func() error {
				rc, err := open()
				if err != nil {
					return err
				}
				defer rc.Close()
				b, err := io.ReadAll(rc)
				if err != nil {
					return err
				}
				if string(b) != *files[names[i]] {
					return fmt.Errorf("%s: %d bytes, want %d", names[i], len(b), len(*files[names[i]]))
				}
				return nil
			})
		}
	}
	if err := eg.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedBlobIsRefetched damages a file's blob in the cache on disk:
// reading it fails naming the object and the pack, and the next fetch
// fetches the cache again and reads it whole.
func TestDamagedBlobIsRefetched(t *testing.T) {
	repo := gittest.NewRepo(t)
	big := strings.Repeat("some content that zlib packs\n", 2000)
	repo.Commit("tree", map[string]*string{"big": &big})
	blob := plumbing.NewHash(repo.Git("-C", repo.Dir, "rev-parse", "HEAD:big"))
	g := &Git{Branch: "main", Cache: state.At(t.TempDir()), Timeout: 20 * time.Second}
	g.URL, _ = repo.Daemon(t)
	co, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, co, "big"); got != big {
		t.Fatalf("big reads %d bytes", len(got))
	}
	co.Close()

	p := g.packs.packs[0]
	off, _, _ := p.lookup(blob)
	hd, err := g.packs.header(p, off)
	if err != nil {
		t.Fatal(err)
	}
	pack, err := os.ReadFile(p.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	pack[hd.data+8] ^= 0x55
	if err := os.WriteFile(p.f.Name(), pack, 0o600); err != nil {
		t.Fatal(err)
	}

	fetches := g.Stats.Fetches
	co, err = g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, err = co.Tree.Open("big")
	co.Close()
	if err == nil || !strings.Contains(err.Error(), blob.String()) || !strings.Contains(err.Error(), p.name) {
		t.Fatalf("a damaged blob read: %v", err)
	}
	co, err = g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if got := readFile(t, co, "big"); got != big {
		t.Fatalf("after the damage, big reads %d bytes", len(got))
	}
	if g.Stats.Fetches != fetches+1 {
		t.Fatalf("%d fetches after the damage, want 1", g.Stats.Fetches-fetches)
	}
}

// TestTreeOutlivesRebuild keeps the tree of the revision the host is on
// open while the cache is rebuilt under it (a force-push marks it, the
// next fetch removes it and fetches again; issue 18 §3): every tree and
// blob of it still reads, as the agent's drift scan reads them.
func TestTreeOutlivesRebuild(t *testing.T) {
	repo := gittest.NewRepo(t)
	files := map[string]*string{}
	for i := range 30 {
		files[fmt.Sprintf("kb/d%d/f%d.md", i%5, i)] = gittest.S(fmt.Sprintf("file %d\n", i))
	}
	repo.Commit("one", files)
	g := &Git{Branch: "main", Cache: state.At(t.TempDir()), Timeout: 20 * time.Second}
	g.URL, _ = repo.Daemon(t)
	first, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	files["kb/d0/f0.md"] = gittest.S("rewritten\n")
	repo.Commit("rewritten", files)
	repo.Git("-C", repo.Dir, "reset", "-q", "--soft", "HEAD~1")
	repo.Git("-C", repo.Dir, "commit", "-q", "--amend", "-m", "history rewritten")
	applied, err := g.Fetch(context.Background()) // the force-push: followed, the cache marked
	if err != nil {
		t.Fatal(err)
	}
	defer applied.Close()
	if len(applied.Notes) == 0 {
		t.Fatal("no force-push noticed")
	}
	readAll := func() error {
		n := 0
		err := applied.Tree.Walk("kb", func(e Entry) error {
			if !e.Mode.IsRegular() {
				return nil
			}
			n++
			rc, err := e.Open()
			if err != nil {
				return err
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			if want := *files["kb/"+e.Path]; err == nil && string(b) != want {
				return fmt.Errorf("%s reads %q, want %q", e.Path, b, want)
			}
			return err
		})
		if err == nil && n != len(files) {
			err = fmt.Errorf("%d files read, want %d", n, len(files))
		}
		return err
	}
	if err := readAll(); err != nil { // applied: read, as the agent plans it
		t.Fatal(err)
	}
	again, err := g.Fetch(context.Background()) // the rebuild
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	if again.Revision != applied.Revision {
		t.Fatalf("rebuilt at %s, applied %s", again.Revision, applied.Revision)
	}
	if err := readAll(); err != nil {
		t.Fatalf("the applied revision after the rebuild: %v", err)
	}
	if got := readFile(t, applied, "kb/d0/f0.md"); got != "rewritten\n" {
		t.Fatalf("read by path: %q", got)
	}
}

// TestGoGitNeverLoadsAnIndex fetches (a first, shallow fetch, then a thin
// pack on top, then a pinned commit behind the shallow edge), reads the
// trees and files, the changes between revisions and the history of a
// path: go-git never opens a pack index, which it would load whole into
// the heap (140 MB at a million objects).
func TestGoGitNeverLoadsAnIndex(t *testing.T) {
	repo := gittest.NewRepo(t)
	first := repo.Commit("one", similarFiles(30, 7))
	repo.Commit("two", map[string]*string{"d0/f0.txt": gittest.S("changed\n"), "new/file": gittest.S("new\n")})
	before := goGitIndexReads.Load()
	g := &Git{Branch: "main", Cache: state.At(t.TempDir()), Timeout: 20 * time.Second}
	g.URL, _ = repo.Daemon(t)
	one, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	repo.Commit("three", map[string]*string{"d0/f0.txt": gittest.S("changed again\n")})
	two, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	n := 0
	if err := two.Tree.Walk(".", func(e Entry) error {
		if e.Open != nil {
			rc, err := e.Open()
			if err != nil {
				return err
			}
			rc.Close()
			n++
		}
		return nil
	}); err != nil || n != 31 {
		t.Fatalf("walked %d files: %v", n, err)
	}
	if got := readFile(t, two, "d0/f0.txt"); got != "changed again\n" {
		t.Fatalf("d0/f0.txt reads %q", got)
	}
	if paths, ok, err := two.Tree.(Differ).Changes(one.Tree, ".", 10); err != nil || !ok || len(paths) != 1 {
		t.Fatalf("changes %q %v %v", paths, ok, err)
	}
	h, err := OpenHistory(g.Cache, g.URL, two.Revision)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.LastChange("d0/f0.txt", 10); err != nil {
		t.Fatal(err)
	}
	g.Commit = first // behind the shallow edge: the cache is deepened
	old, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if got := goGitIndexReads.Load() - before; got != 0 {
		t.Fatalf("go-git opened a pack index %d times", got)
	}
}
