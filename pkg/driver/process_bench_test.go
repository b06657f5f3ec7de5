package driver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
	if len(os.Args) > 2 && os.Args[1] == listenArg {
		// A server for the benchmarks that starts fast and steadily.
		if _, err := net.Listen("tcp", os.Args[2]); err != nil {
			os.Exit(1)
		}
		select {}
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
	sd := state.At(b.TempDir())
	return &driver.Env{Root: root, Set: set, State: sd, Snapshot: snap, Backups: &driver.Backups{State: sd}, Concurrency: 2}
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
		_, statusFile := supervise.Files(e.State.Path(), name)
		os.MkdirAll(filepath.Dir(statusFile), 0o700)
		r := set.Get(resource.ID("Process/" + name))
		st, _ := json.Marshal(supervise.Status{Shim: id, Process: id, State: supervise.Running, Ready: true, Hash: hashOf(b, e, r)})
		os.WriteFile(statusFile, st, 0o600)
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

// pythonServer is a server on port that starts listening as its start-up
// ends; SO_REUSEADDR lets a new copy bind at once after the last died.
func pythonServer(port int) []string {
	return []string{"python3", "-c", fmt.Sprintf("import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', %d)); s.listen(); time.sleep(600)", port)}
}

func benchPort(b *testing.B) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitListening polls until the port accepts a connection.
func waitListening(b *testing.B, port int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("nothing listens on %d", port)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// listenArg makes this test binary a server: __listen ADDRESS.
const listenArg = "__listen"

// BenchmarkKillToServing kills (SIGKILL) a server that has been up past
// its minUptime and times how long until it serves again: the supervisor's
// reaction (from the kill to the new process's start) and the whole (to
// serving), beside the server's own start-up, measured alone under the
// same load. The server is this test binary in a listening mode: it starts
// in a few milliseconds, so the supervisor's share is not lost in noise.
// The supervisor is the re-executed one (separate) or this process, as the
// agent hosts it (hosted).
func BenchmarkKillToServing(b *testing.B) {
	b.Run("separate", func(b *testing.B) { killToServing(b, false) })
	b.Run("hosted", func(b *testing.B) { killToServing(b, true) })
}

func killToServing(b *testing.B, hosted bool) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	port, other := benchPort(b), benchPort(b)
	server := func(port int) []string { return []string{exe, listenArg, fmt.Sprintf("127.0.0.1:%d", port)} }
	var alone []time.Duration
	startAlone := func() {
		start := time.Now()
		cmd := exec.Command(exe, server(other)[1:]...)
		cmd.Start()
		waitListening(b, other)
		alone = append(alone, time.Since(start))
		cmd.Process.Kill()
		cmd.Wait()
	}
	argv, _ := json.Marshal(server(port))
	doc := fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: web}\nspec:\n  command: %s\n  minUptime: 50ms\n  stopTimeout: 1s\n", argv)
	set := manifests(b, map[string]string{"web.yaml": doc})
	e := env(b, set, &state.Snapshot{})
	b.Cleanup(func() { supervise.StopAll(e.State.Path()) })
	if hosted {
		h, err := supervise.NewHost(e.State.Path())
		if err != nil {
			b.Skip(err)
		}
		b.Cleanup(func() { h.Handover() })
	}
	host := driver.Host{Env: e}
	r := set.Get("Process/web")
	c, err := host.Observe(context.Background(), r, nil)
	if err != nil {
		b.Fatal(err)
	}
	c.ID, c.Kind, c.Desired, c.Action = r.ID(), r.Kind, r, diff.Create
	if _, err := host.Apply(context.Background(), c); err != nil {
		b.Fatal(err)
	}
	waitListening(b, port)
	if st, _ := supervise.Read(e.State.Path(), "web"); (st.Shim == supervise.Self()) != hosted {
		b.Fatalf("hosted %v, but the supervisor is pid %d", hosted, st.Shim.PID)
	}
	var serving, reaction []time.Duration
	for b.Loop() {
		st, _ := supervise.Read(e.State.Path(), "web")
		for time.Since(st.Started) < 60*time.Millisecond { // up past minUptime
			time.Sleep(time.Millisecond)
		}
		killed := time.Now()
		syscall.Kill(st.Process.PID, syscall.SIGKILL)
		for st.Process.Alive() { // dead: its socket is closed
			time.Sleep(50 * time.Microsecond)
		}
		waitListening(b, port)
		serving = append(serving, time.Since(killed))
		next, _ := supervise.Read(e.State.Path(), "web")
		for deadline := time.Now().Add(5 * time.Second); next.Process == st.Process || next.State != supervise.Running; {
			if time.Now().After(deadline) {
				b.Fatal("the status never showed the new process")
			}
			time.Sleep(100 * time.Microsecond)
			next, _ = supervise.Read(e.State.Path(), "web")
		}
		// The new process's start, stamped by its supervisor as it forks.
		reaction = append(reaction, next.Started.Sub(killed))
		startAlone()
	}
	b.ReportMetric(ms(median(alone)), "alone-median-ms")
	b.ReportMetric(ms(median(serving)), "kill-to-serving-median-ms")
	b.ReportMetric(ms(median(reaction)), "kill-to-restart-median-ms")
	b.ReportMetric(ms(slices.Max(reaction)), "kill-to-restart-max-ms")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkSupervisorFootprint builds cortex-sync, syncs 1 and then 10
// supervised processes, each with a readiness and a liveness probe at
// their default timing (every 10s) — exec probes ("true") or TCP probes
// of servers — and reports the supervisor's memory (VmRSS as
// /proc/PID/status counts it, and PSS) per supervised process, 2s after
// the sync and again after 15s idle, its anonymous part, and its idle CPU
// over those 15s: its own, and with its children's (the exec probes).
func BenchmarkSupervisorFootprint(b *testing.B) {
	if _, err := exec.LookPath("python3"); err != nil {
		b.Skip("python3 not found")
	}
	bin := buildRelease(b)
	for b.Loop() {
		for _, tt := range []struct {
			probe string
			n     int
		}{{"exec", 1}, {"exec", 10}, {"tcp", 10}} {
			dir := b.TempDir()
			repo, root, state := filepath.Join(dir, "repo"), filepath.Join(dir, "root"), filepath.Join(dir, "state")
			os.MkdirAll(repo, 0o755)
			os.MkdirAll(root, 0o755)
			for i := range tt.n {
				cmd, probe := `[sleep, "600"]`, `{exec: {command: ["true"]}}`
				if tt.probe == "tcp" {
					port := benchPort(b)
					argv, _ := json.Marshal(pythonServer(port))
					cmd, probe = string(argv), fmt.Sprintf(`{tcp: {address: "127.0.0.1:%d"}}`, port)
				}
				doc := fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: p%d}\nspec:\n  command: %s\n  readinessProbe: %s\n  livenessProbe: %s\n", i, cmd, probe, probe)
				os.WriteFile(filepath.Join(repo, fmt.Sprintf("p%d.yaml", i)), []byte(doc), 0o644)
			}
			if out, err := exec.Command(bin, "sync", "--wait", "--dir", repo, "--root", root, "--state-dir", state).CombinedOutput(); err != nil {
				b.Fatalf("sync: %v\n%s", err, out)
			}
			st, _ := supervise.Read(state, "p0")
			pid := st.Shim.PID
			time.Sleep(2 * time.Second) // settle: the first probes, the first GC
			rss, _ := vmRSS(pid)
			anon, _ := procKB(fmt.Sprintf("/proc/%d/status", pid), "RssAnon:")
			pss, _ := procKB(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
			own0, all0, t0 := cpuTicks(pid, 2), cpuTicks(pid, 4), time.Now()
			time.Sleep(15 * time.Second)
			secs := time.Since(t0).Seconds()
			own := float64(cpuTicks(pid, 2)-own0) / 100 / secs * 100
			all := float64(cpuTicks(pid, 4)-all0) / 100 / secs * 100
			// Again after the idle time: what the probes, GCs and log
			// checks fault back in.
			idle, _ := vmRSS(pid)
			supervise.StopAll(state)
			unit := fmt.Sprintf("-%s-%d", tt.probe, tt.n)
			b.ReportMetric(float64(rss)/1024, "RSS-MB"+unit)
			b.ReportMetric(float64(rss)/1024/float64(tt.n), "RSS-MB/proc"+unit)
			b.ReportMetric(float64(anon)/1024, "RssAnon-MB"+unit)
			b.ReportMetric(float64(idle)/1024/float64(tt.n), "RSS-MB/proc-after-idle"+unit)
			b.ReportMetric(float64(pss)/1024/float64(tt.n), "PSS-MB/proc"+unit)
			b.ReportMetric(own, "CPU-%"+unit)
			b.ReportMetric(all, "CPU-%-with-probes"+unit)
		}
	}
}

// buildRelease builds cortex-sync as released (.goreleaser.yaml):
// static, stripped.
func buildRelease(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "cortex-sync")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "../../cmd/cortex-sync")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// BenchmarkAgentFootprint runs the agent (release build) with 0, 1 and 10
// processes, each with exec readiness and liveness probes at their default
// timing, supervised in the agent (hosted) and, with cgroups turned off,
// by the re-executed supervisor beside it (fallback); alternately, so load
// on the host hits both alike. It reports the agent's VmRSS 2s after all
// run and ready, the supervisor's in the fallback, what a hosted process
// adds to the agent ((RSS with 10 − with 0)/10), and the idle CPU over 15s
// of the agent and the supervisor, and with the probes' own processes.
func BenchmarkAgentFootprint(b *testing.B) {
	if dir, why := supervise.CgroupBase(b.TempDir()); dir == "" {
		b.Skip("the agent does not host the supervisor here: " + why)
	} else {
		os.Remove(dir)
	}
	bin := buildRelease(b)
	for b.Loop() {
		agents := map[string]map[int]footprint{}
		for _, mode := range []string{"hosted", "fallback"} {
			rss, got := map[int]float64{}, map[int]footprint{}
			agents[mode] = got
			for _, n := range []int{0, 1, 10} {
				m := agentFootprint(b, bin, n, mode == "hosted")
				unit := fmt.Sprintf("-%s-%d", mode, n)
				rss[n], got[n] = m.agentRSS, m
				b.ReportMetric(m.agentRSS, "agent-RSS-MB"+unit)
				b.ReportMetric(m.agentCPU, "agent-CPU-%"+unit)
				b.ReportMetric(m.agentAll, "agent-CPU-%-with-probes"+unit)
				if mode == "fallback" && n > 0 {
					b.ReportMetric(m.supRSS, "supervisor-RSS-MB"+unit)
					b.ReportMetric(m.supCPU, "supervisor-CPU-%"+unit)
					b.ReportMetric(m.supAll, "supervisor-CPU-%-with-probes"+unit)
				}
			}
			b.ReportMetric(rss[1]-rss[0], "agent-RSS-MB-added-by-1-"+mode)
			b.ReportMetric((rss[10]-rss[0])/10, "agent-RSS-MB/proc-added-by-10-"+mode)
		}
		// What supervising costs per process, beside what the agent
		// spends on a Process resource either way: the hosted agent's RSS
		// over the fallback agent's, against the re-executed supervisor's.
		for _, n := range []int{1, 10} {
			h, f := agents["hosted"][n], agents["fallback"][n]
			b.ReportMetric((h.agentRSS-f.agentRSS)/float64(n), fmt.Sprintf("supervising-RSS-MB/proc-hosted-%d", n))
			b.ReportMetric(f.supRSS/float64(n), fmt.Sprintf("supervising-RSS-MB/proc-fallback-%d", n))
		}
	}
}

type footprint struct {
	agentRSS, agentCPU, agentAll float64 // MB, % of a core
	supRSS, supCPU, supAll       float64 // the re-executed supervisor's, in the fallback
}

// agentFootprint starts the agent on n processes, waits until they run and
// are ready, and measures it.
func agentFootprint(b *testing.B, bin string, n int, hosted bool) footprint {
	dir := b.TempDir()
	repo, root, state := filepath.Join(dir, "repo"), filepath.Join(dir, "root"), filepath.Join(dir, "state")
	os.MkdirAll(repo, 0o755)
	os.MkdirAll(root, 0o755)
	for i := range n {
		doc := fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: p%d}\nspec:\n  command: [sleep, \"600\"]\n  readinessProbe: {exec: {command: [\"true\"]}}\n  livenessProbe: {exec: {command: [\"true\"]}}\n", i)
		os.WriteFile(filepath.Join(repo, fmt.Sprintf("p%d.yaml", i)), []byte(doc), 0o644)
	}
	log, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	agent := exec.Command(bin, "run", "--dir", repo, "--root", root, "--state-dir", state, "--listen", "127.0.0.1:0", "--interval", "1h", "--drift-interval", "1h")
	agent.Env = os.Environ()
	if !hosted {
		agent.Env = append(agent.Env, supervise.CgroupEnv+"=off")
	}
	agent.Stdout, agent.Stderr = log, log
	if err := agent.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		agent.Process.Signal(syscall.SIGTERM)
		agent.Wait()
		supervise.StopAll(state)
	}()
	// Up: the snapshot written, every process running and ready.
	deadline := time.Now().Add(30 * time.Second)
	var sup int
	for {
		up := true
		if _, err := os.Stat(filepath.Join(state, "state.json")); err != nil {
			up = false
		}
		for i := range n {
			st, _ := supervise.Read(state, fmt.Sprintf("p%d", i))
			if st == nil || st.State != supervise.Running || !st.Ready || !st.Shim.Alive() {
				up = false
				break
			}
			sup = st.Shim.PID
		}
		if up {
			break
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(log.Name())
			b.Fatalf("the agent did not bring %d processes up within 30s:\n%s", n, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	pid := agent.Process.Pid
	if n > 0 && (sup == pid) != hosted {
		b.Fatalf("hosted %v, but the supervisor is pid %d and the agent %d", hosted, sup, pid)
	}
	time.Sleep(2 * time.Second) // settle: the first probes, the first GC
	var m footprint
	kb, _ := vmRSS(pid)
	m.agentRSS = float64(kb) / 1024
	if !hosted && n > 0 {
		kb, _ := vmRSS(sup)
		m.supRSS = float64(kb) / 1024
	}
	own0, all0, sown0, sall0, t0 := cpuTicks(pid, 2), cpuTicks(pid, 4), cpuTicks(sup, 2), cpuTicks(sup, 4), time.Now()
	time.Sleep(15 * time.Second)
	pct := func(ticks int64) float64 { return float64(ticks) / 100 / time.Since(t0).Seconds() * 100 }
	m.agentCPU, m.agentAll = pct(cpuTicks(pid, 2)-own0), pct(cpuTicks(pid, 4)-all0)
	if !hosted && n > 0 {
		m.supCPU, m.supAll = pct(cpuTicks(sup, 2)-sown0), pct(cpuTicks(sup, 4)-sall0)
	}
	return m
}

// cpuTicks is a process's CPU time in clock ticks (1/100 s): its own
// (fields 2: utime, stime) or with its reaped children's (4).
func cpuTicks(pid, fields int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	var sum int64
	for _, i := range []int{11, 12, 13, 14}[:fields] { // utime stime cutime cstime
		v, _ := strconv.ParseInt(f[i], 10, 64)
		sum += v
	}
	return sum
}

// BenchmarkStartToHealthy starts a server under its supervisor and waits until
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
		supervise.StopAll(e.State.Path())
	}
	b.ReportMetric(float64(alone.Milliseconds())/float64(b.N), "alone-ms/op")
	b.ReportMetric(float64(managed.Milliseconds())/float64(b.N), "managed-ms/op")
	b.ReportMetric(float64((managed-alone).Milliseconds())/float64(b.N), "overhead-ms/op")
}

func vmRSS(pid int) (int, bool) { return procKB(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:") }

// procKB reads a "Field:   123 kB" line of a /proc file.
func procKB(file, field string) (int, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
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
