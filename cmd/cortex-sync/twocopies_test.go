package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// TestNeverTwoCopies: a sync changing a Process that holds a port and a
// slow Command is killed (SIGKILL) at 20 seeded random moments; after
// each, another sync converges, and at no moment do two copies of the
// process run (the second would crash-loop on "Address already in use").
func TestNeverTwoCopies(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found")
	}
	if testing.Short() {
		t.Skip("20 killed syncs take a while")
	}
	dir := t.TempDir()
	repo, root, state := filepath.Join(dir, "repo"), filepath.Join(dir, "root"), filepath.Join(dir, "state")
	os.MkdirAll(repo, 0o755)
	os.MkdirAll(root, 0o755)
	t.Cleanup(func() { supervise.StopAll(state) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	marker := fmt.Sprintf("two-copies-%d", port)
	write := func(v int) {
		t.Helper()
		doc := fmt.Sprintf(`apiVersion: cortex-sync/v1alpha1
kind: Process
metadata: {name: web}
spec:
  command: [python3, -c, "import socket,sys,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', %d)); s.listen(); print('serving', sys.argv[1], flush=True); time.sleep(3600)", "%s-v%d"]
  stopTimeout: 5s
  readinessProbe: {tcp: {address: "127.0.0.1:%d"}}
---
apiVersion: cortex-sync/v1alpha1
kind: Command
metadata: {name: slow}
spec:
  command: [sh, -c, "sleep 0.4; echo v%d"]
`, port, marker, v, port, v)
		if err := os.WriteFile(filepath.Join(repo, "all.yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"sync", "--dir", repo, "--root", root, "--state-dir", state}
	sync := func() {
		t.Helper()
		out, err := exec.Command("cortex-sync", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("sync: %v\n%s", err, out)
		}
	}
	write(0)
	sync()

	// Watch all along: never two copies at once.
	var most atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if n := int64(copies(marker)); n > most.Load() {
				most.Store(n)
			}
		}
	}()
	defer func() { close(stop); <-watched }()

	r := rand.New(rand.NewPCG(8, 2026))
	for i := 1; i <= 20; i++ {
		write(i)
		killAt := time.Duration(r.Int64N(int64(1200 * time.Millisecond)))
		cmd := exec.Command("cortex-sync", args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(killAt) // the random moment is the test's input
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		sync()
		if n := copies(marker); n != 1 {
			t.Fatalf("round %d (sync killed after %s): %d copies run", i, killAt, n)
		}
		out, err := exec.Command("cortex-sync", "diff", "--exit-code", "--dir", repo, "--root", root, "--state-dir", state).CombinedOutput()
		if err != nil {
			t.Fatalf("round %d (sync killed after %s): not converged: %v\n%s", i, killAt, err, out)
		}
		st, _ := supervise.Read(state, "web")
		if st == nil || st.State != supervise.Running || st.QuickExits != 0 {
			t.Fatalf("round %d (sync killed after %s): web %+v, want running with no failure", i, killAt, st)
		}
	}
	if n := most.Load(); n > 1 {
		t.Fatalf("at some moment %d copies ran", n)
	}
}

// copies counts the live processes whose command line holds marker.
func copies(marker string) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(marker)) && supervise.Of(pid).Alive() {
			n++
		}
	}
	return n
}
