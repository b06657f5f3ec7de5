package source_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// cutProxy forwards TCP connections to a server. A connection accepted
// while cut is set gets the server's first limit bytes and then nothing
// more, never closed: a fetch cut off mid-pack, waiting on a server gone
// quiet.
type cutProxy struct {
	ln    net.Listener
	to    string
	limit int64
	cut   atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, to string, limit int64) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, to: to, limit: limit}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *cutProxy) serve(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	s, err := net.Dial("tcp", p.to)
	if err != nil {
		c.Close()
		return
	}
	go func() { io.Copy(s, c); s.Close() }()
	if !p.cut.Load() {
		io.Copy(c, s)
		c.Close()
		return
	}
	io.CopyN(c, s, p.limit)
	s.Close() // the client waits on, until it is killed or the test ends
}

// TestHelperFetch is no test: startFetch runs it as a fetch of its own.
func TestHelperFetch(t *testing.T) {
	v, ok := os.LookupEnv("CORTEX_SYNC_TEST_FETCH")
	if !ok {
		return
	}
	url, cache, _ := strings.Cut(v, " ")
	g := &source.Git{URL: url, Branch: "main", Cache: state.At(cache), Timeout: 10 * time.Minute}
	_, err := g.Fetch(context.Background())
	fmt.Fprintln(os.Stderr, "fetch:", err)
	os.Exit(1)
}

// startFetch starts a cortex-sync fetch of url into cache in a process of
// its own, and returns it with the temp pack it writes once that exists.
func startFetch(t *testing.T, url, cache string, others []string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFetch$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CORTEX_SYNC_TEST_FETCH="+url+" "+cache)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		temps, _ := filepath.Glob(filepath.Join(cache, "git-*", "objects", "pack", ".cortex-sync-*-pack"))
		for _, tmp := range temps {
			if !slices.Contains(others, tmp) {
				return cmd, tmp
			}
		}
	}
	t.Fatal("no temp pack appeared in the cache")
	return nil, ""
}

// TestKilledFetchesTempPackIsSwept: a fetch SIGKILLed mid-pack leaves its
// temp pack; the next cortex-sync to open the cache removes it, and keeps
// the temp pack of a fetch that still runs beside it (an agent and a sync
// share the cache, and neither holds the state lock to fetch).
func TestKilledFetchesTempPackIsSwept(t *testing.T) {
	repo := gittest.NewRepo(t)
	blob := make([]byte, 4<<20) // incompressible: the pack is as large
	rand.Read(blob)
	repo.Commit("big", map[string]*string{"a": gittest.S("a\n"), "big": gittest.S(string(blob))})
	daemon, _ := repo.Daemon(t)
	host := strings.TrimPrefix(daemon, "git://")
	host, path, _ := strings.Cut(host, "/")
	p := newCutProxy(t, host, 256<<10)
	url := "git://" + p.ln.Addr().String() + "/" + path
	cache := t.TempDir()

	p.cut.Store(true)
	killed, killedTemp := startFetch(t, url, cache, nil)
	live, liveTemp := startFetch(t, url, cache, []string{killedTemp})
	killed.Process.Kill()
	killed.Wait()
	if _, err := os.Lstat(killedTemp); err != nil {
		t.Fatalf("the killed fetch left no temp pack: %v", err)
	}

	p.cut.Store(false)
	g := &source.Git{URL: url, Branch: "main", Cache: state.At(cache), Timeout: time.Minute}
	if _, got := fetchFile(t, g, "a"); got != "a\n" {
		t.Fatalf("fetched %q", got)
	}
	if _, err := os.Lstat(killedTemp); err == nil {
		t.Errorf("the killed fetch's temp pack is still there: %s", filepath.Base(killedTemp))
	}
	if _, err := os.Lstat(liveTemp); err != nil {
		t.Fatalf("the temp pack of the fetch still running was removed: %v", err)
	}

	// Killed in its turn, its temp pack goes with the next opening.
	live.Process.Kill()
	live.Wait()
	g = &source.Git{URL: url, Branch: "main", Cache: state.At(cache), Timeout: time.Minute}
	fetchFile(t, g, "a")
	if _, err := os.Lstat(liveTemp); err == nil {
		t.Errorf("the second killed fetch's temp pack is still there: %s", filepath.Base(liveTemp))
	}
}
