package source_test

import (
	"context"
	"errors"
	"fmt"
	"go/build"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/sync/errgroup"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
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
	g := &source.Git{URL: url, Branch: "main", Cache: state.At(b.TempDir()), Timeout: 20 * time.Second}
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

// goSourceDaemon serves a commit of GOROOT/src (about 11,000 files) from
// git daemon, as the bench command does, its first pack already made once.
func goSourceDaemon(b *testing.B) string {
	repo := gittest.NewRepo(b)
	src := filepath.Join(build.Default.GOROOT, "src")
	if out, err := exec.Command("cp", "-a", src, filepath.Join(repo.Dir, "kb")).CombinedOutput(); err != nil {
		b.Skipf("copy %s: %v: %s", src, err, out)
	}
	repo.Commit("tree", nil)
	url, _ := repo.Daemon(b)
	g := &source.Git{URL: url, Branch: "main", Cache: state.At(b.TempDir()), Timeout: 10 * time.Minute}
	if _, err := g.Fetch(context.Background()); err != nil {
		b.Fatal(err)
	}
	return url
}

// coldFetch fetches url into an empty cache.
func coldFetch(b *testing.B, url string) *source.Checkout {
	g := &source.Git{URL: url, Branch: "main", Cache: state.At(b.TempDir()), Timeout: 10 * time.Minute}
	co, err := g.Fetch(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return co
}

// BenchmarkColdFetch is a first fetch of GOROOT/src into an empty cache.
func BenchmarkColdFetch(b *testing.B) {
	url := goSourceDaemon(b)
	for b.Loop() {
		co := coldFetch(b, url)
		co.Close()
	}
}

// BenchmarkColdFetchRead is a first fetch that then reads every file, as
// a first sync does (on as many goroutines as cores), without the writes.
func BenchmarkColdFetchRead(b *testing.B) {
	url := goSourceDaemon(b)
	for b.Loop() {
		co := coldFetch(b, url)
		var eg errgroup.Group
		eg.SetLimit(runtime.GOMAXPROCS(0))
		err := co.Tree.Walk(".", func(e source.Entry) error {
			if e.Open == nil {
				return nil
			}
			eg.Go(func() error {
				rc, err := e.Open()
				if err != nil {
					return err
				}
				defer rc.Close()
				_, err = io.Copy(io.Discard, rc)
				return err
			})
			return nil
		})
		if err := errors.Join(err, eg.Wait()); err != nil {
			b.Fatal(err)
		}
		co.Close()
	}
}
