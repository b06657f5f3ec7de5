package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// TestMain lets this test binary serve as the shim it starts.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.ShimArg {
		os.Exit(supervise.RunShim(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func manifests(b testing.TB, docs map[string]string) *resource.Set {
	b.Helper()
	fsys := fstest.MapFS{}
	for name, d := range docs {
		fsys[name] = &fstest.MapFile{Data: []byte(d)}
	}
	set, err := resource.Load(fsys, ".", driver.Kinds())
	if err != nil {
		b.Fatal(err)
	}
	return set
}

func env(b testing.TB, set *resource.Set, snap *state.Snapshot) *driver.Env {
	b.Helper()
	root, err := hostfs.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { root.Close() })
	sd := state.Dir{Path: b.TempDir()}
	return &driver.Env{Root: root, Set: set, State: sd, Snapshot: snap, Backups: &driver.Backups{Dir: sd.Sub("backups")}, Concurrency: 2}
}

// BenchmarkObserve200Processes plans 200 running processes: per process a
// status file and the pid and start time of the shim and the process.
func BenchmarkObserve200Processes(b *testing.B) {
	const n = 200
	docs := map[string]string{}
	for i := range n {
		docs[fmt.Sprintf("p%d.yaml", i)] = fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: p%d}\nspec: {command: [sleep, \"600\"]}\n", i)
	}
	set := manifests(b, docs)
	snap := &state.Snapshot{}
	e := env(b, set, snap)
	for i := range n {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		id := supervise.Of(cmd.Process.Pid)
		name := fmt.Sprintf("p%d", i)
		_, statusFile := supervise.Files(e.State.Path, name)
		os.MkdirAll(filepath.Dir(statusFile), 0o700)
		st, _ := json.Marshal(supervise.Status{Shim: id, Process: id, State: supervise.Running, Ready: true})
		os.WriteFile(statusFile, st, 0o600)
		r := set.Get(resource.ID("Process/" + name))
		c, err := driver.Host{Env: e}.Observe(context.Background(), r, nil)
		if err != nil {
			b.Fatal(err)
		}
		_ = c
		extra, _ := json.Marshal(map[string]any{"shim": id, "process": id, "hash": hashOf(b, e, r)})
		snap.Put(&state.Entry{ID: "Process/" + name, Kind: "Process", SpecHash: "x", Extra: extra})
	}
	b.ReportAllocs()
	for b.Loop() {
		p := diff.Make(context.Background(), driver.Host{Env: e}, set, snap, 2)
		if p.HasChanges() {
			b.Fatalf("running processes planned a change: %+v", p.Changes[0])
		}
	}
}

// hashOf is the effective hash a started process records, read back from
// a simulated apply.
func hashOf(b testing.TB, e *driver.Env, r *resource.Resource) string {
	sim := *e
	sim.Simulate = true
	entry, err := driver.Host{Env: &sim}.Apply(context.Background(), &diff.Change{ID: r.ID(), Kind: r.Kind, Action: diff.Create, Desired: r, Work: nil})
	if err != nil {
		b.Fatal(err)
	}
	var x struct{ Hash string }
	json.Unmarshal(entry.Extra, &x)
	return x.Hash
}

// BenchmarkStartToHealthy starts a server under its shim and waits until
// cortex-sync sees it Healthy (its TCP readiness probe passes); the
// server's own start-up, measured alone, is reported beside it.
func BenchmarkStartToHealthy(b *testing.B) {
	if _, err := exec.LookPath("python3"); err != nil {
		b.Skip("python3 not found")
	}
	server := func(port int) []string {
		return []string{"python3", "-c", fmt.Sprintf("import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', %d)); s.listen(); time.sleep(600)", port)}
	}
	freePort := func() int {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	listening := func(port int) {
		for {
			if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				c.Close()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	var alone, managed time.Duration
	for b.Loop() {
		port := freePort()
		start := time.Now()
		cmd := exec.Command(server(port)[0], server(port)[1:]...)
		// The same program the shim runs: found in the clean PATH it gives.
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		cmd.Path = lookClean("python3")
		cmd.Start()
		listening(port)
		alone += time.Since(start)
		cmd.Process.Kill()
		cmd.Wait()

		port = freePort()
		argv, _ := json.Marshal(server(port))
		doc := fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: web}\nspec:\n  command: %s\n  stopTimeout: 1s\n  readinessProbe: {tcp: {address: \"127.0.0.1:%d\"}}\n", argv, port)
		set := manifests(b, map[string]string{"web.yaml": doc})
		e := env(b, set, &state.Snapshot{})
		host := driver.Host{Env: e}
		r := set.Get("Process/web")
		start = time.Now()
		c, err := host.Observe(context.Background(), r, nil)
		if err != nil {
			b.Fatal(err)
		}
		c.ID, c.Kind, c.Desired = r.ID(), r.Kind, r
		entry, err := host.Apply(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		for {
			if rep, _ := host.Ready(context.Background(), entry); rep.Health == health.Healthy {
				break
			}
			time.Sleep(time.Millisecond)
		}
		managed += time.Since(start)
		_, statusFile := supervise.Files(e.State.Path, "web")
		st, _ := supervise.ReadStatus(statusFile)
		if rss, ok := vmRSS(st.Shim.PID); ok {
			b.ReportMetric(float64(rss), "shim-RSS-KiB")
		}
		supervise.StopAll(e.State.Path)
	}
	b.ReportMetric(float64(alone.Milliseconds())/float64(b.N), "alone-ms/op")
	b.ReportMetric(float64(managed.Milliseconds())/float64(b.N), "managed-ms/op")
	b.ReportMetric(float64((managed-alone).Milliseconds())/float64(b.N), "overhead-ms/op")
}

func vmRSS(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb, true
		}
	}
	return 0, false
}

func lookClean(name string) string {
	for _, dir := range strings.Split("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", ":") {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return filepath.Join(dir, name)
		}
	}
	return name
}
