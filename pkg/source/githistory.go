package source

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// ErrNotCached reports a revision the Git cache does not hold: the cache
// was never filled, rebuilt since, or the commit is not in it.
var ErrNotCached = errors.New("not in the Git cache")

// History is one commit of a Git source read from its cache alone: no
// network, no lock, nothing written (what explain reads). It answers
// which commit last changed a path, walking first-parent history.
type History struct {
	store  *packStorer
	packs  *packSet
	commit *object.Commit
}

// OpenHistory opens revision ("main@sha1:…") of the repository at url in
// the cache dir (stateDir/cache) without touching the network or writing
// to the cache. A revision the cache lacks is ErrNotCached.
func OpenHistory(cacheDir state.Dir, url, revision string) (*History, error) {
	_, sha, ok := strings.Cut(revision, "@sha1:")
	if !ok || !isSHA1(sha) {
		return nil, fmt.Errorf("revision %q names no commit (a revision reads like main@sha1:<40 hex digits>)", revision)
	}
	g := &Git{URL: url, Cache: cacheDir}
	dir := g.cacheDir()
	if _, err := dir.Lstat("HEAD"); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w (%s has no cache of %s yet)", revision, ErrNotCached, cacheDir, url)
	} else if err != nil {
		return nil, err
	}
	packs, err := openPacks(dir)
	if err != nil {
		return nil, fmt.Errorf("git cache %s: %w", dir, err)
	}
	st := filesystem.NewStorageWithOptions(cacheFS{dir}, cache.NewObjectLRU(cacheObjects), filesystem.Options{})
	h := &History{store: &packStorer{EncodedObjectStorer: st, packs: packs}, packs: packs}
	h.commit, err = object.GetCommit(h.store, plumbing.NewHash(sha))
	if err != nil {
		packs.release()
		return nil, fmt.Errorf("%s: %w (%v)", revision, ErrNotCached, err)
	}
	return h, nil
}

// Close releases the cache's packs.
func (h *History) Close() error {
	h.packs.release()
	return nil
}

// Tree is the revision's tree, read like a fetched one. The caller closes it.
func (h *History) Tree() (Tree, error) {
	return newGitTree(h.store.EncodedObjectStorer, h.commit.TreeHash, h.packs)
}

// Commit is what a change says of the commit that made it.
type Commit struct {
	Hash    string    `json:"commit"`
	Author  string    `json:"author"`
	Email   string    `json:"email,omitempty"`
	Time    time.Time `json:"time"`
	Subject string    `json:"subject,omitempty"`
}

// Change is the commit that last changed a path, as far as History could
// see.
type Change struct {
	Commit
	// Exact is false when the walk stopped before it found the change: at
	// its bound, or at the edge of a shallow cache. The change was then
	// made in Commit or before it.
	Exact bool `json:"exact"`
	// Walked is how many commits the walk looked at.
	Walked int `json:"walked"`
}

// LastChange walks the revision's first-parent history, newest first, for
// the commit nearest it where the object at p (a slash path from the
// repository's top: a blob, or a whole directory's tree) differs from the
// first parent's, looking at no more than limit commits. A commit without
// a parent, or whose parent the cache lacks (a shallow fetch), ends the
// walk; only a commit with no parent at all is then the exact answer.
func (h *History) LastChange(p string, limit int) (Change, error) {
	changes, err := h.LastChanges([]string{p}, limit)
	if err != nil {
		return Change{}, err
	}
	return changes[0], nil
}

// LastChanges is LastChange for each of paths, in one walk.
func (h *History) LastChanges(paths []string, limit int) ([]Change, error) {
	type walk struct {
		names []string
		chain []treeObject
		done  bool
	}
	walks := make([]walk, len(paths))
	changes := make([]Change, len(paths))
	c := h.commit
	for i, p := range paths {
		if p = strings.Trim(path.Clean("/"+p), "/"); p != "" {
			walks[i].names = strings.Split(p, "/")
		}
		var err error
		if walks[i].chain, _, err = h.chain(c, walks[i].names, nil); err != nil {
			return nil, err
		}
	}
	left := len(paths)
	// end settles every walk still going at c.
	end := func(walked int, exact bool) []Change {
		for i := range walks {
			if !walks[i].done {
				changes[i] = Change{Commit: commitOf(c), Walked: walked, Exact: exact}
			}
		}
		return changes
	}
	for walked := 1; left > 0; walked++ {
		if c.NumParents() == 0 {
			return end(walked, true), nil
		}
		if walked >= limit {
			return end(walked, false), nil
		}
		parent, err := object.GetCommit(h.store, c.ParentHashes[0])
		if err != nil {
			return end(walked, false), nil // the edge of a shallow history
		}
		for i := range walks {
			w := &walks[i]
			if w.done {
				continue
			}
			was, same, err := h.chain(parent, w.names, w.chain)
			if err != nil {
				return nil, err
			}
			if !same {
				changes[i] = Change{Commit: commitOf(c), Walked: walked, Exact: true}
				w.done = true
				left--
				continue
			}
			w.chain = was
		}
		c = parent
	}
	return changes, nil
}

// treeObject is what a tree holds at a path: its hash and mode (a mode
// change, such as the executable bit, is a change too).
type treeObject struct {
	hash plumbing.Hash
	mode filemode.FileMode
}

// chain is what c holds down the path names: its root tree, then each
// name's object, as far as they exist (shorter than names+1 when the path
// is absent). Given known, another commit's chain for the same path, it
// also reports whether both hold the same at the path, and stops at the
// first level where they agree: what lies below is then known's.
func (h *History) chain(c *object.Commit, names []string, known []treeObject) ([]treeObject, bool, error) {
	at := []treeObject{{hash: c.TreeHash, mode: filemode.Dir}}
	agree := func(i int) bool { return i < len(known) && known[i] == at[i] }
	if agree(0) {
		return known, true, nil
	}
	for i, name := range names {
		if at[i].mode != filemode.Dir {
			break // below a file there is nothing
		}
		t, err := object.GetTree(h.store, at[i].hash)
		if err != nil {
			return nil, false, fmt.Errorf("commit %s: read tree: %w", c.Hash, err)
		}
		e, err := t.FindEntry(name)
		if err != nil {
			break
		}
		at = append(at, treeObject{hash: e.Hash, mode: e.Mode})
		if agree(i + 1) {
			return append(at, known[i+2:]...), true, nil
		}
	}
	whole := func(ch []treeObject) bool { return len(ch) == len(names)+1 }
	same := whole(at) == whole(known) && (!whole(at) || at[len(at)-1] == known[len(known)-1])
	return at, same, nil
}

func commitOf(c *object.Commit) Commit {
	subject, _, _ := strings.Cut(strings.TrimSpace(c.Message), "\n")
	return Commit{Hash: c.Hash.String(), Author: c.Author.Name, Email: c.Author.Email, Time: c.Author.When, Subject: subject}
}
