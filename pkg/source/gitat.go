package source

import (
	"context"
	"fmt"
	"strings"
)

// At fetches an earlier revision of this source (a Checkout's Revision:
// "main@sha1:…", "v1.2.0@sha1:…") through the same cache, for a rollback
// to a revision the host applied before. Nothing is downloaded when the
// cache holds its commit (one listing of the remote's refs, as for any
// fetch); else the ref the revision names is fetched, and must still hold
// the commit. Like Fetch, it must not run beside another call on g.
//
// With verification on, the revision the host runs (Base) is not verified
// again; any other is verified as the mode asks, ancestry as head: what it
// descends from was checked when it was applied, and a rollback target
// never applied has its own signature checked at least.
func (g *Git) At(ctx context.Context, revision string) (*Checkout, error) {
	name, sha, ok := strings.Cut(revision, "@sha1:")
	if !ok || name == "" || !isSHA1(sha) {
		return nil, fmt.Errorf("revision %q names no commit of %s (a revision reads like main@sha1:<40 hex digits>)", revision, g.URL)
	}
	branch, tag, semver, commit, mode := g.Branch, g.Tag, g.Semver, g.Commit, g.VerifyMode
	defer func() { g.Branch, g.Tag, g.Semver, g.Commit, g.VerifyMode = branch, tag, semver, commit, mode }()
	if g.mode() == VerifyAncestry {
		g.VerifyMode = VerifyHead
	}
	if tag != "" || semver != "" {
		// A tag names one commit: fetch the tag, and check it still does.
		g.Tag, g.Semver, g.Commit, g.Branch = name, "", "", ""
	} else {
		g.Branch, g.Commit, g.Tag, g.Semver = name, sha, "", ""
	}
	co, err := g.Fetch(ctx)
	if err != nil {
		return nil, err
	}
	if co.Revision != revision {
		co.Close()
		return nil, fmt.Errorf("%s: tag %s now names %s, not the commit %s applied before", g.URL, name, co.Revision, sha)
	}
	return co, nil
}

// deepenAll is the depth of a fetch that deepens a shallow cache to the
// whole history of the ref.
const deepenAll = 1 << 30

// isShallow reports whether the cache holds a shallow history.
func isShallow(c *gitCache) bool {
	s, err := c.storage.Shallow()
	return err == nil && len(s) > 0
}
