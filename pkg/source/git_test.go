package source_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// fetchFile fetches and reads one file of the checkout.
func fetchFile(t *testing.T, g *source.Git, name string) (string, string) {
	t.Helper()
	co, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	b, err := fs.ReadFile(co.Tree, name)
	if err != nil {
		t.Fatal(err)
	}
	return co.Revision, string(b)
}

func newGit(t *testing.T, url string) *source.Git {
	return &source.Git{URL: url, Branch: "main", Cache: state.At(t.TempDir()), Timeout: 20 * time.Second}
}

// TestTransports fetches over every transport: first sync, then a new commit.
func TestTransports(t *testing.T) {
	repo := gittest.NewRepo(t)
	first := repo.Commit("one", map[string]*string{"hosts/web1/motd": gittest.S("one\n")})
	// Each server belongs to its subtest: whatever it does to t (skip,
	// fail, clean up) stays there.
	transports := map[string]func(t *testing.T) *source.Git{
		"git": func(t *testing.T) *source.Git { u, _ := repo.Daemon(t); return newGit(t, u) },
		"http": func(t *testing.T) *source.Git {
			h := repo.HTTP(t, "alice", "s3cret")
			g := newGit(t, h.URL)
			pw := filepath.Join(t.TempDir(), "pw")
			os.WriteFile(pw, []byte("s3cret\n"), 0o600)
			g.Auth = source.Auth{Username: "alice", PasswordFile: pw}
			return g
		},
		"ssh": func(t *testing.T) *source.Git {
			s := repo.SSHD(t)
			g := newGit(t, s.URL)
			g.Auth = source.Auth{SSHKeyFile: s.KeyFile, KnownHostsFile: s.KnownHosts}
			return g
		},
		"file": func(t *testing.T) *source.Git { return newGit(t, "file://"+repo.Dir) },
	}
	for name, mk := range transports {
		t.Run(name, func(t *testing.T) {
			g := mk(t)
			rev, got := fetchFile(t, g, "hosts/web1/motd")
			if rev != "main@sha1:"+first || got != "one\n" {
				t.Fatalf("got %s %q, want main@sha1:%s %q", rev, got, first, "one\n")
			}
			second := repo.Commit("two", map[string]*string{"hosts/web1/motd": gittest.S("two\n")})
			rev, got = fetchFile(t, g, "hosts/web1/motd")
			if rev != "main@sha1:"+second || got != "two\n" {
				t.Fatalf("after a new commit: %s %q", rev, got)
			}
			repo.Git("-C", repo.Dir, "reset", "-q", "--hard", first) // leave it as found
		})
	}
}

// TestNoOpPollDoesNotFetch: with nothing new, a poll is one ref listing.
func TestNoOpPollDoesNotFetch(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("one", map[string]*string{"a": gittest.S("a")})
	h := repo.HTTP(t, "u", "p")
	g := newGit(t, h.URL)
	pw := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pw, []byte("p"), 0o600)
	g.Auth = source.Auth{Username: "u", PasswordFile: pw}
	fetchFile(t, g, "a")
	before := h.Requests.Load()
	fetchFile(t, g, "a")
	if g.Stats.Fetches != 1 || g.Stats.Lists != 2 {
		t.Fatalf("fetches %d lists %d, want 1 fetch and 2 listings", g.Stats.Fetches, g.Stats.Lists)
	}
	// One listing: the auth challenge and the info/refs request.
	if n := h.Requests.Load() - before; n > 2 {
		t.Fatalf("a no-op poll made %d requests", n)
	}
}

func TestRefs(t *testing.T) {
	repo := gittest.NewRepo(t)
	c1 := repo.Commit("1.0.0", map[string]*string{"v": gittest.S("1.0.0")})
	repo.Git("-C", repo.Dir, "tag", "v1.0.0")
	c2 := repo.Commit("1.4.2", map[string]*string{"v": gittest.S("1.4.2")})
	repo.Git("-C", repo.Dir, "tag", "-a", "-m", "release", "v1.4.2")
	repo.Commit("2.0.0", map[string]*string{"v": gittest.S("2.0.0")})
	repo.Git("-C", repo.Dir, "tag", "v2.0.0")
	repo.Git("-C", repo.Dir, "tag", "not-a-version")
	c4 := repo.Commit("main", map[string]*string{"v": gittest.S("main")})
	url, _ := repo.Daemon(t)
	tests := []struct {
		name    string
		set     func(g *source.Git)
		rev     string
		content string
	}{
		{"branch", func(g *source.Git) {}, "main@sha1:" + c4, "main"},
		{"lightweight tag", func(g *source.Git) { g.Branch, g.Tag = "", "v1.0.0" }, "v1.0.0@sha1:" + c1, "1.0.0"},
		{"annotated tag", func(g *source.Git) { g.Branch, g.Tag = "", "v1.4.2" }, "v1.4.2@sha1:" + c2, "1.4.2"},
		{"semver range", func(g *source.Git) { g.Branch, g.Semver = "", ">=1.2.0 <2.0.0" }, "v1.4.2@sha1:" + c2, "1.4.2"},
		{"semver highest", func(g *source.Git) { g.Branch, g.Semver = "", ">=1.0.0" }, "v2.0.0@sha1:", "2.0.0"},
		{"commit on a branch", func(g *source.Git) { g.Commit = c1 }, "main@sha1:" + c1, "1.0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGit(t, url)
			tt.set(g)
			rev, got := fetchFile(t, g, "v")
			if !strings.HasPrefix(rev, tt.rev) || got != tt.content {
				t.Fatalf("got %s %q, want %s… %q", rev, got, tt.rev, tt.content)
			}
		})
	}
	for _, tt := range []struct {
		name, want string
		set        func(g *source.Git)
	}{
		{"missing branch", "branch nope not found on the remote", func(g *source.Git) { g.Branch = "nope" }},
		{"missing tag", "tag v9 not found on the remote", func(g *source.Git) { g.Branch, g.Tag = "", "v9" }},
		{"no semver match", `no tag matches ">=3" (semver tags: v1.0.0, v1.4.2, v2.0.0)`, func(g *source.Git) { g.Branch, g.Semver = "", ">=3" }},
		{"commit not on branch", "is not on branch main", func(g *source.Git) { g.Commit = strings.Repeat("a", 40) }},
		{"short commit", "give the full 40-hex SHA-1", func(g *source.Git) { g.Commit = c1[:7] }},
		{"commit without branch", "--commit needs --branch", func(g *source.Git) { g.Branch, g.Commit = "", c1 }},
		{"missing path", `path "nowhere" is not in branch main`, func(g *source.Git) { g.Path = "nowhere" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGit(t, url)
			tt.set(g)
			_, err := g.Fetch(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestForcePushIsFollowed(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("one", map[string]*string{"a": gittest.S("one")})
	repo.Commit("two", map[string]*string{"a": gittest.S("two")})
	url, _ := repo.Daemon(t)
	g := newGit(t, url)
	fetchFile(t, g, "a")
	// Rewrite history: an orphan branch replaces main.
	repo.Git("-C", repo.Dir, "checkout", "-q", "--orphan", "new")
	rewritten := repo.Commit("rewritten", map[string]*string{"a": gittest.S("rewritten")})
	repo.Git("-C", repo.Dir, "branch", "-q", "-M", "new", "main")
	co, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := fs.ReadFile(co.Tree, "a")
	if co.Revision != "main@sha1:"+rewritten || string(got) != "rewritten" {
		t.Fatalf("after a force-push: %s %q", co.Revision, got)
	}
	if len(co.Notes) != 1 || !strings.Contains(co.Notes[0], "main was force-pushed") {
		t.Fatalf("the force-push was not reported: %q", co.Notes)
	}
	// The cache is rebuilt on the next fetch, which still works.
	if _, got := fetchFile(t, g, "a"); got != "rewritten" {
		t.Fatalf("after the rebuild: %q", got)
	}
}

// TestPinnedCommitBehindTheBranch: a commit pinned (sync --plan) that the
// cache holds, while the branch moved on: nothing to fetch, and no
// force-push seen in the branch's tip the cache does not have. It was
// reported as one, and the whole cache marked to be rebuilt.
func TestPinnedCommitBehindTheBranch(t *testing.T) {
	repo := gittest.NewRepo(t)
	c1 := repo.Commit("one", map[string]*string{"a": gittest.S("one")})
	url, _ := repo.Daemon(t)
	cache := t.TempDir()
	g := &source.Git{URL: url, Branch: "main", Cache: state.At(cache), Timeout: 20 * time.Second}
	fetchFile(t, g, "a")
	repo.Commit("two", map[string]*string{"a": gittest.S("two")})
	g.Commit = c1
	co, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(co.Notes) != 0 {
		t.Errorf("notes for a pinned commit behind its branch: %q", co.Notes)
	}
	if marks, _ := filepath.Glob(filepath.Join(cache, "*", "cortex-sync-rebuild")); len(marks) != 0 {
		t.Errorf("the cache was marked to be rebuilt: %v", marks)
	}
}

func TestAuthFailures(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("one", map[string]*string{"a": gittest.S("a")})
	h := repo.HTTP(t, "alice", "right")
	wrong := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(wrong, []byte("wrong"), 0o600)
	g := newGit(t, h.URL)
	if _, err := g.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "authentication required") {
		t.Errorf("no credentials: %v", err)
	}
	g.Auth = source.Auth{Username: "alice", PasswordFile: wrong}
	_, err := g.Fetch(context.Background())
	if err == nil || !strings.Contains(err.Error(), h.URL) || !strings.Contains(err.Error(), "branch main") {
		t.Errorf("wrong password: %v, want the URL and ref named", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error shows the password: %v", err)
	}
	// Rotating the secret file works without anything else changing.
	os.WriteFile(wrong, []byte("right\n"), 0o600)
	if _, err := g.Fetch(context.Background()); err != nil {
		t.Errorf("after rotating the password file: %v", err)
	}

	s := repo.SSHD(t)
	for _, tt := range []struct {
		name, known, want string
	}{
		{"changed host key", s.WrongKnownHosts, "does not match the known_hosts file"},
		{"unknown host key", filepath.Join(t.TempDir(), "empty"), "is not in the known_hosts file"},
	} {
		os.WriteFile(filepath.Join(filepath.Dir(tt.known), "empty"), nil, 0o600)
		g := newGit(t, s.URL)
		g.Auth = source.Auth{SSHKeyFile: s.KeyFile, KnownHostsFile: tt.known}
		if _, err := g.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	g = newGit(t, s.URL)
	g.Auth = source.Auth{SSHKeyFile: s.WrongKeyFile, KnownHostsFile: s.KnownHosts}
	if _, err := g.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "the server refused the key") {
		t.Errorf("refused key: %v, want %q", err, "the server refused the key")
	}
	g = newGit(t, s.URL)
	g.Auth = source.Auth{SSHKeyFile: s.KeyFile, InsecureSkipHostKeyCheck: true}
	if _, err := g.Fetch(context.Background()); err != nil {
		t.Errorf("--insecure-skip-host-key-check: %v", err)
	}
}

// pgpKey makes a signing key and its armored public keyring file.
func pgpKey(t *testing.T, name string) (*openpgp.Entity, string) {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", name+"@example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	w, _ := armor.Encode(&b, openpgp.PublicKeyType, nil)
	e.Serialize(w)
	w.Close()
	p := filepath.Join(t.TempDir(), name+".asc")
	os.WriteFile(p, b.Bytes(), 0o600)
	return e, p
}

// signedCommit commits with go-git, signed by key (or with sig as the raw
// signature when key is nil).
func signedCommit(t *testing.T, repo *gittest.Repo, key *openpgp.Entity, rawSig string) string {
	t.Helper()
	r, err := git.PlainOpen(repo.Dir)
	if err != nil {
		t.Fatal(err)
	}
	head, _ := r.Head()
	parent, _ := r.CommitObject(head.Hash())
	sig := object.Signature{Name: "T", Email: "t@example.com", When: time.Now()}
	if key != nil {
		wt, _ := r.Worktree()
		h, err := wt.Commit("signed", &git.CommitOptions{Author: &sig, SignKey: key, AllowEmptyCommits: true})
		if err != nil {
			t.Fatal(err)
		}
		return h.String()
	}
	c := &object.Commit{Author: sig, Committer: sig, Message: "ssh-signed", TreeHash: parent.TreeHash, ParentHashes: []plumbing.Hash{parent.Hash}, PGPSignature: rawSig}
	obj := r.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		t.Fatal(err)
	}
	h, err := r.Storer.SetEncodedObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	r.Storer.SetReference(plumbing.NewHashReference("refs/heads/main", h))
	return h.String()
}

func TestSignatureVerification(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("unsigned", map[string]*string{"a": gittest.S("a")})
	url, _ := repo.Daemon(t)
	trusted, keyring := pgpKey(t, "trusted")
	stranger, _ := pgpKey(t, "stranger")
	verify := func() error {
		g := newGit(t, url)
		g.VerifyKeyring = keyring
		_, err := g.Fetch(context.Background())
		return err
	}
	if err := verify(); !errors.Is(err, source.ErrUntrusted) || !strings.Contains(err.Error(), "is not signed") {
		t.Errorf("unsigned: %v", err)
	}
	c := signedCommit(t, repo, trusted, "")
	if err := verify(); err != nil {
		t.Errorf("signed by a trusted key (%s): %v", c, err)
	}
	c = signedCommit(t, repo, stranger, "")
	err := verify()
	if !errors.Is(err, source.ErrUntrusted) || !strings.Contains(err.Error(), "commit "+c) || !strings.Contains(err.Error(), "key ") {
		t.Errorf("signed by a stranger: %v, want the commit and the signer named", err)
	}
	signedCommit(t, repo, nil, "-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----\n")
	if err := verify(); !errors.Is(err, source.ErrUntrusted) || !strings.Contains(err.Error(), "SSH signature") {
		t.Errorf("SSH-signed: %v", err)
	}
	// A lightweight tag cannot be signed: refused when tags are verified.
	signedCommit(t, repo, trusted, "")
	repo.Git("-C", repo.Dir, "tag", "v1.0.0")
	g := newGit(t, url)
	g.Branch, g.Tag, g.VerifyKeyring, g.VerifyTags = "", "v1.0.0", keyring, true
	if _, err := g.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "lightweight tag") {
		t.Errorf("lightweight tag: %v", err)
	}
}

func TestServerDown(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("one", map[string]*string{"a": gittest.S("a")})
	url, stop := repo.Daemon(t)
	g := newGit(t, url)
	fetchFile(t, g, "a")
	stop()
	_, err := g.Fetch(context.Background())
	if err == nil || !strings.Contains(err.Error(), url) || !strings.Contains(err.Error(), "branch main") {
		t.Fatalf("server down: %v, want the URL and ref named", err)
	}
	// A server that accepts and never answers is bounded by the timeout.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	g = newGit(t, "git://"+l.Addr().String()+"/repo")
	g.Timeout = 500 * time.Millisecond
	start := time.Now()
	_, err = g.Fetch(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no answer within 500ms") {
		t.Fatalf("hung server: %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the 500ms timeout was not respected: %s (the fetch hung)", d) // a bound far off any load, far short of a hang
	}
}

func TestCorruptCacheIsRefetched(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("one", map[string]*string{"a": gittest.S("a")})
	url, _ := repo.Daemon(t)
	g := newGit(t, url)
	fetchFile(t, g, "a")
	// Destroy every object in the cache.
	filepath.WalkDir(g.Cache.Path(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, "objects") {
			os.WriteFile(p, []byte("garbage"), 0o600)
		}
		return nil
	})
	if _, got := fetchFile(t, g, "a"); got != "a" {
		t.Fatalf("after corruption: %q", got)
	}
}

// TestCABundle: an HTTPS server with a certificate of its own is refused
// until its CA is given.
func TestCABundle(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("one", map[string]*string{"a": gittest.S("a")})
	h, ca := repo.HTTPS(t, "u", "p")
	pw := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pw, []byte("p"), 0o600)
	g := newGit(t, h.URL)
	g.Auth = source.Auth{Username: "u", PasswordFile: pw}
	if _, err := g.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v, want a certificate error", err)
	}
	g.Auth.CAFile = ca
	if _, got := fetchFile(t, g, "a"); got != "a" {
		t.Fatalf("with the CA: %q", got)
	}
}

// TestCacheRefusesPlantedLinks: a symlink where the cache dir is, or the
// stat cache of a directory source, is never followed: the fetch fails
// saying so, and nothing is written where it points. One in the Git cache
// of a URL is not followed either: that cache is discarded with it, and
// fetched again.
func TestCacheRefusesPlantedLinks(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("one", map[string]*string{"a": gittest.S("a\n")})
	url, _ := repo.Daemon(t)
	for _, planted := range []string{"cache", "cache/git-%s", "cache/git-%s/objects"} {
		t.Run(strings.ReplaceAll(planted, "/", "_"), func(t *testing.T) {
			victim, stdir := t.TempDir(), t.TempDir()
			g := &source.Git{URL: url, Branch: "main", Cache: state.At(stdir).Sub("cache"), Timeout: 20 * time.Second}
			if strings.Contains(planted, "%s") {
				// The cache's own name: fetch once, then swap a part of it.
				co, err := g.Fetch(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				co.Close()
				entries, _ := os.ReadDir(filepath.Join(stdir, "cache"))
				planted = strings.ReplaceAll(planted, "git-%s", entries[0].Name())
				g = &source.Git{URL: url, Branch: "main", Cache: state.At(stdir).Sub("cache"), Timeout: 20 * time.Second}
			}
			p := filepath.Join(stdir, planted)
			os.MkdirAll(filepath.Dir(p), 0o700)
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, p); err != nil {
				t.Fatal(err)
			}
			_, err := g.Fetch(context.Background())
			if planted == "cache" && !errors.Is(err, state.ErrSymlink) {
				t.Errorf("fetch with %s a symlink: %v, want an error wrapping state.ErrSymlink", planted, err)
			}
			if planted != "cache" {
				if err != nil {
					t.Fatalf("fetch with %s a symlink: %v, want the cache fetched again", planted, err)
				}
				if fi, err := os.Lstat(p); err != nil || fi.Mode()&fs.ModeSymlink != 0 {
					t.Errorf("%s after the fetch: %v, %v", planted, fi, err)
				}
			}
			if entries, _ := os.ReadDir(victim); len(entries) > 0 {
				t.Fatalf("written through %s: %v", planted, entries)
			}
		})
	}
	t.Run("dir stat cache", func(t *testing.T) {
		victim, stdir := t.TempDir(), t.TempDir()
		if err := os.Symlink(victim, filepath.Join(stdir, "cache")); err != nil {
			t.Fatal(err)
		}
		d := &source.Dir{Dir: repo.Dir, Cache: state.At(stdir).Sub("cache")}
		co, err := d.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := co.Tree.ContentID("a"); err != nil {
			t.Fatal(err)
		}
		if err := co.Close(); !errors.Is(err, state.ErrSymlink) {
			t.Errorf("saving the stat cache through a symlink: %v", err)
		}
		if entries, _ := os.ReadDir(victim); len(entries) > 0 {
			t.Fatalf("written through the cache link: %v", entries)
		}
	})
}

// TestTreeChanges: two revisions of a Git tree name the entries that
// changed between them from their tree IDs: a file changed, a directory
// removed or added whole, each once; what is unchanged is never named.
func TestTreeChanges(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("one", map[string]*string{
		"kb/a.md": gittest.S("a\n"), "kb/d/b.md": gittest.S("b\n"), "kb/d/c.md": gittest.S("c\n"),
		"kb/e/f.md": gittest.S("f\n"), "other/x": gittest.S("x\n"),
	})
	g := newGit(t, "file://"+repo.Dir)
	one, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	repo.Commit("two", map[string]*string{"kb/d/b.md": gittest.S("b, edited\n"), "kb/e/f.md": nil, "kb/g/h.md": gittest.S("h\n"), "other/x": gittest.S("y\n")})
	two, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	d, ok := two.Tree.(source.Differ)
	if !ok {
		t.Fatal("a Git tree is no source.Differ")
	}
	paths, ok, err := d.Changes(one.Tree, "kb", 10)
	slices.Sort(paths)
	if err != nil || !ok || !slices.Equal(paths, []string{"d/b.md", "e", "g"}) {
		t.Fatalf("changes %q %v %v, want d/b.md, e, g", paths, ok, err)
	}
	if paths, ok, _ := d.Changes(two.Tree, "kb", 10); !ok || len(paths) != 0 {
		t.Errorf("a tree against itself: %q %v, want nothing", paths, ok)
	}
	if _, ok, _ := d.Changes(one.Tree, "kb", 2); ok {
		t.Error("three changes over a limit of 2 were named")
	}
	dir, err := (&source.Dir{Dir: repo.Dir}).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if _, ok, _ := d.Changes(dir.Tree, "kb", 10); ok {
		t.Error("changes against a directory's tree were named")
	}
}

// TestWalkScope: a narrowed walk of a Git tree and of a directory meets
// what the whole walk meets in the scope and on the way to it, in the
// same order, and nothing else.
func TestWalkScope(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("one", map[string]*string{
		"kb/a.md": gittest.S("a\n"), "kb/d/b.md": gittest.S("b\n"), "kb/d/c.md": gittest.S("c\n"),
		"kb/d/e/f.md": gittest.S("f\n"), "kb/d-x/g.md": gittest.S("g\n"), "kb/h/i.md": gittest.S("i\n"),
	})
	g, err := newGit(t, "file://"+repo.Dir).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	d, err := (&source.Dir{Dir: repo.Dir}).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	scope := []string{"h/i.md", "d/e", "d/b.md", "missing/x", "d/e/f.md"}
	in := func(rel string) bool {
		for _, s := range scope {
			if rel == s || strings.HasPrefix(rel, s+"/") || strings.HasPrefix(s, rel+"/") {
				return true
			}
		}
		return false
	}
	for name, tree := range map[string]source.Tree{"git": g.Tree, "dir": d.Tree} {
		var whole, narrowed []string
		tree.Walk("kb", func(e source.Entry) error {
			if in(e.Path) {
				whole = append(whole, e.Path)
			}
			return nil
		})
		err := source.WalkScope(tree, "kb", scope, func(e source.Entry) error {
			id := ""
			if e.Mode.IsRegular() {
				id, _ = e.ID()
			}
			if e.Mode.IsRegular() && !strings.HasPrefix(id, "git:") {
				t.Errorf("%s: %s has content ID %q", name, e.Path, id)
			}
			narrowed = append(narrowed, e.Path)
			return nil
		})
		if err != nil || !slices.Equal(narrowed, whole) {
			t.Errorf("%s: narrowed walk %q %v, want %q", name, narrowed, err, whole)
		}
	}
}
