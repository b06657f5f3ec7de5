package source_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/source"
)

// gitAt is a source and its fetch count before the test.
type gitAt struct {
	*source.Git
	fetches int
}

// TestAt opens an earlier revision of a branch through the same cache: no
// download when the cache holds it; fetched when it does not, a shallow
// cache included; the tree and subject are that commit's.
func TestAt(t *testing.T) {
	repo := gittest.NewRepo(t)
	one := repo.Commit("first\n\nthe body", map[string]*string{"a": gittest.S("one\n")})
	url, _ := repo.Daemon(t)
	g := newGit(t, url) // applied one, then two: its cache holds both
	co, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	co.Close()
	two := repo.Commit("second", map[string]*string{"a": gittest.S("two\n")})
	if co, err = g.Fetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	co.Close()
	if co.Revision != "main@sha1:"+two || co.Subject != "second" {
		t.Fatalf("head: %s %q", co.Revision, co.Subject)
	}
	fetches := g.Stats.Fetches
	for name, g := range map[string]*gitAt{"cached": {g, fetches}, "fresh cache": {newGit(t, url), 0}} {
		t.Run(name, func(t *testing.T) {
			co, err := g.At(context.Background(), "main@sha1:"+one)
			if err != nil {
				t.Fatal(err)
			}
			defer co.Close()
			b, err := fs.ReadFile(co.Tree, "a")
			if err != nil || string(b) != "one\n" || co.Revision != "main@sha1:"+one || co.Subject != "first" {
				t.Fatalf("at %s: %s %q %q, %v", one, co.Revision, co.Subject, b, err)
			}
			if name == "cached" && g.Stats.Fetches != g.fetches {
				t.Fatalf("%d fetches for a commit the cache holds", g.Stats.Fetches-g.fetches)
			}
			if g.Branch != "main" || g.Commit != "" {
				t.Fatalf("the source changed: branch %q, commit %q", g.Branch, g.Commit)
			}
		})
	}
	// A cache that fetched the head alone (depth 1; made again after a
	// force-push, say) deepens to the rest of the branch.
	shallow := newGit(t, url)
	if co, err := shallow.Fetch(context.Background()); err != nil {
		t.Fatal(err)
	} else {
		co.Close()
	}
	co, err = shallow.At(context.Background(), "main@sha1:"+one)
	if err != nil {
		t.Fatalf("from a shallow cache: %v", err)
	}
	co.Close()
	for _, bad := range []string{"", "main", "main@sha1:123", "@sha1:" + one} {
		if _, err := g.At(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "names no commit") {
			t.Errorf("At(%q): %v", bad, err)
		}
	}
}
