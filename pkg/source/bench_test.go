package source_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/source"
)

// BenchmarkNoOpPoll is a poll of git daemon on 127.0.0.1 when nothing
// changed: one ref listing, no fetch, the tree opened from the cache.
func BenchmarkNoOpPoll(b *testing.B) {
	repo := gittest.NewRepo(b)
	files := map[string]*string{}
	for i := range 2000 {
		files[fmt.Sprintf("kb/d%d/f%d.md", i/50, i)] = gittest.S(fmt.Sprintf("file %d\n", i))
	}
	repo.Commit("tree", files)
	url, _ := repo.Daemon(b)
	g := &source.Git{URL: url, Branch: "main", CacheDir: b.TempDir(), Timeout: 20 * time.Second}
	ctx := context.Background()
	if _, err := g.Fetch(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		co, err := g.Fetch(ctx)
		if err != nil {
			b.Fatal(err)
		}
		co.Close()
	}
	if g.Stats.Fetches != 1 {
		b.Fatalf("%d fetches, want only the first", g.Stats.Fetches)
	}
}

// BenchmarkRefListing is go-git's bare ref listing of the same server: the
// floor under a no-op poll (git daemon forks git-upload-pack per connection).
func BenchmarkRefListing(b *testing.B) {
	repo := gittest.NewRepo(b)
	repo.Commit("x", map[string]*string{"a": gittest.S("a")})
	url, _ := repo.Daemon(b)
	r := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{url}})
	for b.Loop() {
		if _, err := r.List(&git.ListOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
