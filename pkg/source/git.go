package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/Masterminds/semver/v3"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/progress"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Git is a remote repository: one ref of it, fetched into an on-disk cache
// and read straight from the object store (no checkout).
type Git struct {
	URL string
	// Exactly one of Branch, Tag, Semver and Commit names the revision;
	// Commit also takes Branch, the ref to fetch it from.
	Branch, Tag, Semver, Commit string
	Path                        string    // the manifests' path inside the repository
	Cache                       state.Dir // stateDir/cache
	Timeout                     time.Duration
	Auth                        Auth
	// VerifyKeyring, when set, names a file of armored PGP public keys: the
	// tip commit must carry a valid signature by one of them.
	VerifyKeyring string
	// VerifyAllowedSigners, when set, names an OpenSSH allowed_signers
	// file: SSH signatures are verified against it. Either or both of
	// VerifyKeyring and VerifyAllowedSigners may be given; a commit signed
	// by a key of either is trusted.
	VerifyAllowedSigners string
	// VerifyMode says what must be signed: VerifyHead (the default),
	// VerifyTag, VerifyTagAndHead or VerifyAncestry.
	VerifyMode string
	// VerifyTags is VerifyMode tag-and-head, under its older name.
	VerifyTags bool
	// VerifyCommitterMatch requires the signer to be the committer (the
	// tagger for a tag): an SSH principal matching the committer's email,
	// or an OpenPGP key with that email among its identities.
	VerifyCommitterMatch bool
	// Base gives the revision the host runs ("main@sha1:…", or nil or ""
	// when none): ancestry mode verifies every commit after it, and the
	// revision it names is not verified again (it was when applied).
	Base func() string
	Log  *slog.Logger

	// Stats counts network round trips, for tests and metrics.
	Stats struct{ Lists, Fetches int }

	// The open cache and its packs, kept between polls so a no-op poll does
	// not load the pack indexes again.
	cache *gitCache
	packs *packSet
	// abandoned is closed when a go-git call given up on (a timeout, a
	// full disk) has ended: the next fetch waits for it before it touches
	// the cache.
	abandoned chan struct{}
}

// cacheObjects bounds go-git's object cache: its 96 MiB default costs about
// 150 MB of RSS on a large tree.
const cacheObjects = 8 * cache.MiByte

// Ref records the repository and path.
func (g *Git) Ref() state.Source {
	return state.Source{Type: "git", URL: g.URL, Path: cleanPath(g.Path)}
}

// refName describes what is wanted, for messages: "branch main".
func (g *Git) refName() string {
	switch {
	case g.Commit != "":
		return "commit " + g.Commit
	case g.Tag != "":
		return "tag " + g.Tag
	case g.Semver != "":
		return "semver " + g.Semver
	}
	return "branch " + g.Branch
}

// Check validates the ref flags before anything goes on the network.
func (g *Git) Check() error {
	n := 0
	for _, s := range []string{g.Tag, g.Semver, g.Commit} {
		if s != "" {
			n++
		}
	}
	switch {
	case g.URL == "":
		return errors.New("no repository URL")
	case n > 1:
		return errors.New("give one of --branch, --tag, --semver or --commit")
	case g.Commit != "" && !isSHA1(g.Commit):
		return fmt.Errorf("--commit %q: give the full 40-hex SHA-1", g.Commit)
	case g.Commit != "" && g.Branch == "":
		return errors.New("--commit needs --branch, the branch to fetch it from (git daemon and file:// speak protocol v0, which cannot fetch a bare SHA)")
	case g.Branch != "" && n == 1 && g.Commit == "":
		return errors.New("give one of --branch, --tag, --semver or --commit")
	case n == 0 && g.Branch == "":
		return errors.New("no ref given: pass --branch, --tag, --semver or --commit")
	}
	if g.Semver != "" {
		if _, err := semver.NewConstraint(g.Semver); err != nil {
			return fmt.Errorf("--semver %q: %v", g.Semver, err)
		}
	}
	return g.checkVerify()
}

func isSHA1(s string) bool {
	if len(s) != 40 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// bounded runs f but gives up when ctx ends (go-git's git:// and SSH
// connects do not watch the context), or at once when failed says the
// cache could not take what f fetches (go-git itself waits for the server
// to finish sending, which a file:// server never does once its reader
// stopped). The abandoned call ends on its own when the connection fails
// or the rest is read; the next fetch waits for that.
func (g *Git) bounded(ctx context.Context, failed <-chan error, f func() error) error {
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		done <- f()
		close(finished)
	}()
	select {
	case err := <-done:
		return err
	case err := <-failed:
		g.abandoned = finished
		return err
	case <-ctx.Done():
		g.abandoned = finished
		return ctx.Err()
	}
}

// settled waits for a go-git call given up on to end.
func (g *Git) settled(ctx context.Context) error {
	if g.abandoned == nil {
		return nil
	}
	select {
	case <-g.abandoned:
		g.abandoned = nil
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the last fetch, given up on, has not ended yet: %w", ctx.Err())
	}
}

// cache is the on-disk repository cache of one remote URL.
type gitCache struct {
	dir     state.Dir
	storage *filesystem.Storage
}

// cacheName is the cache of the URL's name in the cache dir.
func (g *Git) cacheName() string {
	sum := sha256.Sum256([]byte(g.URL))
	return "git-" + hex.EncodeToString(sum[:8])
}

func (g *Git) cacheDir() state.Dir { return g.Cache.Sub(g.cacheName()) }

func openCache(dir state.Dir) (*gitCache, bool, error) {
	fresh := false
	if _, err := dir.Lstat("HEAD"); errors.Is(err, fs.ErrNotExist) {
		fresh = true
		h, err := dir.Open(true)
		if err != nil {
			return nil, false, err
		}
		h.Close()
	} else if err != nil {
		return nil, false, err
	}
	st := filesystem.NewStorageWithOptions(cacheFS{dir}, cache.NewObjectLRU(cacheObjects), filesystem.Options{})
	if fresh {
		if _, err := git.Init(st, nil); err != nil && !errors.Is(err, git.ErrRepositoryAlreadyExists) {
			return nil, false, err
		}
	}
	return &gitCache{dir: dir, storage: st}, fresh, nil
}

// sweepCache removes the temp files that fetches killed mid-write left in
// the cache: a pack and its index in objects/pack (as large as the pack
// was when the kill came), go-git's packed-refs and loose objects, a
// spilled delta base. The cache is shared by every cortex-sync on the
// state dir (an agent and a sync beside it) and fetched into without the
// state lock, so a temp file whose writer still runs is kept
// (hostfs.Abandoned).
func sweepCache(dir state.Dir) error {
	for _, d := range []state.Dir{dir, dir.Sub(packDir)} {
		if _, err := d.RemoveAbandoned(); err != nil {
			return err
		}
	}
	return nil
}

// Fetch resolves the ref with one listing of the remote's refs and fetches
// only when the cache lacks that revision.
func (g *Git) Fetch(ctx context.Context) (*Checkout, error) {
	if err := g.Check(); err != nil {
		return nil, err
	}
	if g.Log == nil {
		g.Log = slog.New(slog.DiscardHandler)
	}
	if g.Timeout <= 0 {
		g.Timeout = 60 * time.Second
	}
	co, err := g.fetch(ctx)
	var corrupt *corruptCacheError
	if errors.As(err, &corrupt) {
		g.Log.Warn("discarding a corrupt git cache", "url", g.URL, "error", corrupt.err)
		g.closeCache()
		if rmErr := g.Cache.RemoveAll(g.cacheName()); rmErr != nil {
			return nil, rmErr
		}
		co, err = g.fetch(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("fetch %s (%s): %w", g.URL, g.refName(), err)
	}
	return co, nil
}

// corruptCacheError marks a local cache problem: the cache is discarded and
// the fetch tried once more.
type corruptCacheError struct{ err error }

func (e *corruptCacheError) Error() string { return "corrupt cache: " + e.err.Error() }

func (g *Git) fetch(ctx context.Context) (*Checkout, error) {
	if err := g.settled(ctx); err != nil {
		return nil, err
	}
	dir := g.cacheDir()
	if _, err := dir.Lstat(rebuildMarker); err == nil {
		g.Log.Info("rebuilding the git cache", "url", g.URL)
		g.closeCache()
		if err := g.Cache.RemoveAll(g.cacheName()); err != nil {
			return nil, err
		}
	}
	if g.cache != nil && g.packs.changed() {
		g.Log.Warn("the git cache changed on disk: opening it again", "url", g.URL)
		g.closeCache()
	}
	c, fresh := g.cache, false
	if c == nil {
		var err error
		if c, fresh, err = openCache(dir); err != nil {
			return nil, &corruptCacheError{err}
		}
		if err := sweepCache(dir); err != nil {
			g.Log.Warn("could not remove the temp files killed fetches left in the git cache", "url", g.URL, "error", err)
		}
		packs, err := openPacks(dir)
		if err != nil {
			return nil, &corruptCacheError{err}
		}
		g.cache, g.packs = c, packs
	}
	auth, err := g.Auth.method(g.URL, g.Log)
	if err != nil {
		return nil, err
	}
	ca, err := g.Auth.caBundle()
	if err != nil {
		return nil, err
	}
	store := &packStore{Storage: c.storage, dir: c.dir, packs: g.packs, failed: make(chan error, 1)}
	defer store.close()
	remote := git.NewRemote(store, &config.RemoteConfig{Name: "origin", URLs: []string{g.URL}})

	ctx, cancel := context.WithTimeout(ctx, g.Timeout)
	defer cancel()
	var refs []*plumbing.Reference
	g.Stats.Lists++
	err = g.bounded(ctx, nil, func() error {
		var err error
		refs, err = remote.ListContext(ctx, &git.ListOptions{Auth: auth, CABundle: ca, PeelingOption: git.AppendPeeled, Timeout: int(g.Timeout.Seconds())})
		return err
	})
	if err != nil {
		return nil, explain(err, g.Timeout)
	}
	want, err := g.resolve(refs)
	if err != nil {
		return nil, err
	}

	old, _ := c.storage.Reference(want.ref)
	fetchRef := func(depth int) error {
		spec := config.RefSpec("+" + want.ref.String() + ":" + want.ref.String())
		g.Stats.Fetches++
		opts := &git.FetchOptions{
			RefSpecs: []config.RefSpec{spec}, Depth: depth, Auth: auth, CABundle: ca,
			Tags: git.NoTags, Force: true,
		}
		// The first fetch is the long one: at a terminal, a spinner says
		// what the server reports (never the URL, which may hold a token).
		if fresh {
			if w := progress.Lines(ctx, "fetching "+want.ref.Short()); w != nil {
				opts.Progress = w
				defer w.Close()
			}
		}
		err := g.bounded(ctx, store.failed, func() error { return remote.FetchContext(ctx, opts) })
		if errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("%w (the disk of the Git cache, %s, is full: free space there)", err, dir)
		}
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			return explain(err, g.Timeout)
		}
		// The new pack was installed behind go-git's back: its storages
		// load the pack indexes again.
		c.storage.Reindex()
		packs, err := openPacks(dir)
		if err != nil {
			return &corruptCacheError{err}
		}
		g.packs.release()
		g.packs = packs
		store.adopt(packs)
		if fresh {
			recordSize(dir)
		}
		return nil
	}
	if !g.holds(want) {
		// Shallow only the first time: a depth-1 fetch into a shallow cache
		// downloads the whole pack again, a depth-0 one only what is new.
		// Ancestry mode walks back to the applied commit: the whole
		// history at once.
		depth := 0
		if fresh && g.Commit == "" && !(g.verifying() && g.mode() == VerifyAncestry && !g.base().IsZero()) {
			depth = 1
		}
		if g.Commit != "" && isShallow(c) {
			depth = deepenAll // an older commit, behind a shallow cache's edge
		}
		if err := fetchRef(depth); err != nil {
			return nil, err
		}
	}
	commit, err := object.GetCommit(g.objects(), want.commit)
	if err != nil {
		if g.Commit != "" {
			return nil, fmt.Errorf("commit %s is not on branch %s", g.Commit, g.Branch)
		}
		return nil, &corruptCacheError{err}
	}
	var notes []string
	// A force-push is told from the tip the cache fetched: a pinned commit
	// it held already fetched nothing, and the tip it does not have says
	// nothing of the branch's history.
	_, tipErr := object.GetCommit(g.objects(), want.tip)
	if old != nil && old.Hash() != want.tip && tipErr == nil && !g.descends(c, want.tip, old.Hash()) {
		notes = append(notes, fmt.Sprintf("%s was force-pushed: %s replaced %s, which is not in its history; following it", want.ref.Short(), want.tip, old.Hash()))
		markRebuild(dir) // go-git never collects the orphaned objects
	} else if outgrown(dir) {
		markRebuild(dir)
	}
	if g.verifying() {
		// Deepening a shallow cache for ancestry fetches the ref again: the
		// whole of its history.
		deepen := func() error { return fetchRef(deepenAll) }
		if err := g.verify(c, commit, want, deepen); err != nil {
			return nil, err
		}
	}
	tree, err := commit.Tree()
	if err != nil {
		return nil, &corruptCacheError{err}
	}
	p := cleanPath(g.Path)
	if p == "" {
		p = "."
	}
	t, err := newGitTree(c.storage, tree.Hash, g.packs)
	if err != nil {
		return nil, &corruptCacheError{err}
	}
	if _, err := fs.Stat(t, p); err != nil {
		return nil, fmt.Errorf("path %q is not in %s at %s", g.Path, g.refName(), commit.Hash)
	}
	subject, _, _ := strings.Cut(strings.TrimSpace(commit.Message), "\n")
	return &Checkout{Revision: want.name + "@sha1:" + want.commit.String(), Tree: t, Path: p, Notes: notes, Subject: subject}, nil
}

// holds reports whether the cache has what want names: its commit, and an
// annotated tag's own object (signed again on the same commit, a tag is a
// new object the commit does not bring).
func (g *Git) holds(want *wanted) bool {
	if _, err := object.GetCommit(g.objects(), want.commit); err != nil {
		return false
	}
	if want.tag && want.tip != want.commit {
		if _, err := g.objects().EncodedObject(plumbing.TagObject, want.tip); err != nil {
			return false
		}
	}
	return true
}

// wanted is a resolved ref.
type wanted struct {
	name   string                 // "main", "v1.2.3"
	ref    plumbing.ReferenceName // what is fetched
	tip    plumbing.Hash          // what the ref points at (a tag object for annotated tags)
	commit plumbing.Hash          // the commit to apply
	tag    bool
}

func (g *Git) resolve(refs []*plumbing.Reference) (*wanted, error) {
	byName := map[plumbing.ReferenceName]plumbing.Hash{}
	for _, r := range refs {
		if r.Type() == plumbing.HashReference {
			byName[r.Name()] = r.Hash()
		}
	}
	lookup := func(name plumbing.ReferenceName, short string, tag bool) (*wanted, error) {
		h, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("%s not found on the remote", strings.TrimPrefix(g.refName(), ""))
		}
		w := &wanted{name: short, ref: name, tip: h, commit: h, tag: tag}
		if peeled, ok := byName[name+"^{}"]; ok {
			w.commit = peeled // an annotated tag: the commit it points at
		}
		return w, nil
	}
	switch {
	case g.Commit != "":
		w, err := lookup(plumbing.NewBranchReferenceName(g.Branch), g.Branch, false)
		if err != nil {
			return nil, err
		}
		w.commit = plumbing.NewHash(g.Commit)
		return w, nil
	case g.Tag != "":
		return lookup(plumbing.NewTagReferenceName(g.Tag), g.Tag, true)
	case g.Semver != "":
		c, _ := semver.NewConstraint(g.Semver)
		type cand struct {
			v    *semver.Version
			name string
		}
		var best *cand
		var seen []string
		for name := range byName {
			if !name.IsTag() || strings.HasSuffix(name.String(), "^{}") {
				continue
			}
			short := name.Short()
			v, err := semver.NewVersion(short)
			if err != nil {
				continue
			}
			seen = append(seen, short)
			if c.Check(v) && (best == nil || v.GreaterThan(best.v)) {
				best = &cand{v, short}
			}
		}
		if best == nil {
			sort.Strings(seen)
			return nil, fmt.Errorf("no tag matches %q (semver tags: %s)", g.Semver, orNone(seen))
		}
		return lookup(plumbing.NewTagReferenceName(best.name), best.name, true)
	}
	return lookup(plumbing.NewBranchReferenceName(g.Branch), g.Branch, false)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// descends reports whether commit has ancestor among its parents, walking
// what the cache holds (a shallow history ends early: then it is unknown,
// and treated as not descending).
func (g *Git) descends(c *gitCache, commit, ancestor plumbing.Hash) bool {
	seen := map[plumbing.Hash]bool{}
	queue := []plumbing.Hash{commit}
	for len(queue) > 0 && len(seen) < 100000 {
		h := queue[0]
		queue = queue[1:]
		if h == ancestor {
			return true
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		cm, err := object.GetCommit(g.objects(), h)
		if err != nil {
			continue
		}
		// A tag object on the way: follow it to its commit.
		queue = append(queue, cm.ParentHashes...)
	}
	return false
}

const (
	rebuildMarker = "cortex-sync-rebuild"
	sizeFile      = "cortex-sync-initial-size"
)

func markRebuild(dir state.Dir) {
	dir.WriteFile(rebuildMarker, nil)
}

// dirSize is what the cache's objects take.
func dirSize(dir state.Dir) int64 {
	h, err := dir.Sub("objects").Open(false)
	if err != nil {
		return 0
	}
	defer h.Close()
	return treeSize(h)
}

func treeSize(h *hostfs.Dir) int64 {
	var n int64
	entries, _ := h.ReadDir()
	for _, e := range entries {
		if e.IsDir() {
			if sub, err := h.OpenDir(e.Name()); err == nil {
				n += treeSize(sub)
				sub.Close()
			}
		} else if st, err := h.Lstat(e.Name()); err == nil {
			n += st.Size
		}
	}
	return n
}

func recordSize(dir state.Dir) {
	dir.WriteFile(sizeFile, []byte(strconv.FormatInt(dirSize(dir), 10)))
}

// outgrown reports a cache grown past four times its first clone: go-git
// never garbage-collects, so it is rebuilt instead.
func outgrown(dir state.Dir) bool {
	b, err := dir.ReadFile(sizeFile)
	if err != nil {
		return false
	}
	initial, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return initial > 0 && dirSize(dir) > 4*initial+(16<<20)
}

// objects is the open cache's object store, read through its packs as
// they are when an object is read.
func (g *Git) objects() *packStorer {
	return &packStorer{EncodedObjectStorer: g.cache.storage, current: func() *packSet { return g.packs }}
}

// closeCache forgets the open cache; trees still open keep the packs
// they read until they close.
func (g *Git) closeCache() {
	g.packs.release()
	g.cache, g.packs = nil, nil
}
