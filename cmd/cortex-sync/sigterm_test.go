package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/syncbuf"
)

// TestSIGTERMAtRandomPoints: SIGTERM at random points of a busy agent's
// life (a first sync of a 2,000-file mirror, a new revision, healing, the
// drift scan) always ends it, with exit 0 and every step logged, within a
// few seconds: it once hung for good. The bound asserted is generous (a
// loaded machine); the agent's own bounds are 5 s of drain and 3 s of
// saving.
func TestSIGTERMAtRandomPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops an agent several times")
	}
	bin := filepath.Join(t.TempDir(), "cortex-sync")
	if err := os.Symlink(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	generation := func(g int) {
		for i := range 2000 {
			p := filepath.Join(repo, "kb", fmt.Sprintf("d%02d", i%40), fmt.Sprintf("f%04d.md", i))
			os.MkdirAll(filepath.Dir(p), 0o755)
			if i%2 == 0 || g == 0 {
				os.WriteFile(p, []byte(fmt.Sprintf("file %d generation %d\n", i, g)), 0o644)
			}
		}
	}
	generation(0)
	os.WriteFile(filepath.Join(repo, "kb.yaml"), []byte("apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: motd}\nspec: {path: /etc/motd, content: \"hi\\n\"}\n"), 0o644)
	os.WriteFile(filepath.Join(repo, ".cortexignore"), []byte("kb/\n"), 0o644)
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for round := range 5 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		stderr := &syncbuf.Buffer{}
		cmd := exec.Command(bin, "run", "--dir", repo, "--root", root, "--state-dir", stateDir, "--listen", addr,
			"--interval", "200ms", "--drift-interval", "300ms", "--log-level", "info")
		cmd.Env = append(os.Environ(), "CORTEX_SYNC_CGROUP=off")
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// From when it runs as the agent (its signals handled: a SIGTERM
		// before that is the default's, as for any program).
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(stderr.String(), `msg="agent started"`); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("round %d: the agent did not start:\n%s", round, stderr.String())
			}
		}
		busy := time.Duration(rng.IntN(1500)) * time.Millisecond
		time.Sleep(busy) // a random point of its life
		if round%2 == 1 {
			generation(round) // a new revision under way
			os.WriteFile(filepath.Join(root, "etc/motd"), []byte("edited\n"), 0o644)
		}
		sent := time.Now()
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			took := time.Since(sent)
			if err != nil {
				t.Fatalf("round %d (SIGTERM after %s): exit %v after %s\n%s", round, busy, err, took, stderr.String())
			}
			if !strings.Contains(stderr.String(), "msg=\"stopping: finishing what is in flight\"") {
				t.Errorf("round %d: the stop was not logged:\n%s", round, stderr.String())
			}
			t.Logf("round %d: SIGTERM after %s, exited in %s", round, busy, took.Round(time.Millisecond))
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("round %d (SIGTERM after %s): still running 30s later\n%s", round, busy, stderr.String())
		}
	}
}
