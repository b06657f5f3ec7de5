package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/internal/syncbuf"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// Singletons across agents that are real processes of the built binary
// (this test binary run as cortex-sync), so that an agent can be
// SIGKILLed: each holder's singleton logs a tick every 20 ms with
// O_APPEND to one file, with its own clock reading (one machine: one
// clock), and two hosts' runs of ticks never overlap.

// singletonFleet is a repository whose every host has the singleton
// "single", and the agents that run it.
type singletonFleet struct {
	t         testing.TB
	bin       string
	repo      string
	ticks     string
	endpoints []string
	fleet     string
	agents    map[string]*procAgent
	args      []string // more flags for every agent
}

func newSingletonFleet(t testing.TB, endpoints []string) *singletonFleet {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "cortex-sync")
	if err := os.Symlink(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	f := &singletonFleet{t: t, bin: bin, repo: filepath.Join(dir, "repo"), ticks: filepath.Join(dir, "ticks.log"),
		endpoints: endpoints, fleet: "single", agents: map[string]*procAgent{}}
	files := map[string]string{
		"fleet.yaml": "apiVersion: cortex-sync/v1alpha1\nkind: Fleet\nmetadata: {name: single}\nspec:\n  hosts:\n    - match: {}\n      paths: [base]\n",
		"base/single.yaml": fmt.Sprintf(`apiVersion: cortex-sync/v1alpha1
kind: Process
metadata: {name: single}
spec:
  singleton: true
  stopTimeout: 1s
  command: [sh, -c, 'while :; do echo "$(date +%%s.%%N) $CORTEX_SYNC_ROOT" >> %s; sleep 0.02; done']
`, f.ticks),
	}
	for name, content := range files {
		p := filepath.Join(f.repo, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "singleton"}} {
		cmd := exec.Command("git", append([]string{"-C", f.repo}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	t.Cleanup(func() {
		for _, a := range f.agents {
			a.stop(syscall.SIGTERM)
		}
		for _, a := range f.agents {
			supervise.StopAll(a.state)
		}
	})
	return f
}

// procAgent is an agent run as its own process.
type procAgent struct {
	f           *singletonFleet
	name        string
	root, state string
	endpoints   []string
	cmd         *exec.Cmd
	stderr      *syncbuf.Buffer
	done        chan struct{}
}

// start starts host name's agent (again, on its root and state dir),
// reaching etcd at endpoints (nil: the fleet's).
func (f *singletonFleet) start(name string, endpoints []string) *procAgent {
	f.t.Helper()
	a := f.agents[name]
	if a == nil {
		a = &procAgent{f: f, name: name, root: f.t.TempDir(), state: f.t.TempDir()}
		f.agents[name] = a
	}
	if endpoints == nil {
		endpoints = f.endpoints
	}
	a.endpoints = endpoints
	a.stderr = &syncbuf.Buffer{}
	a.cmd = exec.Command(f.bin, "run", "--repo", "file://"+f.repo, "--branch", "main", "--root", a.root, "--state-dir", a.state,
		"--host-name", name, "--etcd-endpoints", strings.Join(endpoints, ","), "--singleton-ttl", "2s",
		"--interval", "1h", "--listen", "127.0.0.1:0", "--log-level", "info")
	a.cmd.Args = append(a.cmd.Args, f.args...)
	a.cmd.Stderr = a.stderr
	if err := a.cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	a.done = make(chan struct{})
	go func() { a.cmd.Wait(); close(a.done) }()
	return a
}

// stop signals the agent and waits for it to exit.
func (a *procAgent) stop(sig syscall.Signal) {
	if a.cmd == nil {
		return
	}
	a.cmd.Process.Signal(sig)
	select {
	case <-a.done:
	case <-time.After(40 * time.Second):
		a.cmd.Process.Kill()
		<-a.done
	}
	a.cmd = nil
}

// holder is the host that holds the singleton in etcd ("" when none).
func (f *singletonFleet) holder() string {
	c, err := fleet.Dial(fleet.Config{Endpoints: f.endpoints, Fleet: f.fleet, RequestTimeout: time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	defer c.Close()
	h, _ := c.SingletonHolder(context.Background(), "single")
	return h
}

// runsOn names the hosts whose singleton process runs now.
func (f *singletonFleet) runsOn() []string {
	var out []string
	for n, a := range f.agents {
		if st, _ := supervise.Read(a.state, "single"); st != nil && st.Process.Alive() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// waitRunsOn waits until the singleton runs on exactly one host, not
// on any of not; it returns that host.
func (f *singletonFleet) waitRunsOn(limit time.Duration, not ...string) string {
	f.t.Helper()
	for deadline := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) {
		if on := f.runsOn(); len(on) == 1 && !slices.Contains(not, on[0]) {
			return on[0]
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for n, a := range f.agents {
				fmt.Fprintf(&logs, "--- %s:\n%s\n", n, a.stderr.String())
			}
			f.t.Fatalf("after %s the singleton does not run on exactly one host other than %v: runs on %v\n%s", limit, not, f.runsOn(), logs.String())
		}
	}
}

// tickRun is one host's unbroken run of ticks.
type tickRun struct {
	root       string
	first, end float64
}

// runs reads the ticks as each host's runs: ticks of one host less than
// 200 ms apart are one run.
func (f *singletonFleet) runs() []tickRun {
	b, _ := os.ReadFile(f.ticks)
	by := map[string][]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) != 2 {
			continue
		}
		at, err := strconv.ParseFloat(w[0], 64)
		if err == nil {
			by[w[1]] = append(by[w[1]], at)
		}
	}
	var out []tickRun
	for root, ts := range by {
		slices.Sort(ts)
		r := tickRun{root: root, first: ts[0], end: ts[0]}
		for _, t := range ts[1:] {
			if t-r.end > 0.2 {
				out = append(out, r)
				r = tickRun{root: root, first: t}
			}
			r.end = t
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b tickRun) int { return cmp.Compare(a.first, b.first) })
	return out
}

// overlap is the time two hosts ran the singleton at once, by the
// processes' own clock readings, and the gaps between hand-offs.
func overlap(runs []tickRun) (total float64, gaps []float64) {
	for i := 1; i < len(runs); i++ {
		for j := range i {
			if runs[j].root != runs[i].root {
				total += max(0, min(runs[i].end, runs[j].end)-max(runs[i].first, runs[j].first))
			}
		}
		gaps = append(gaps, runs[i].first-runs[i-1].end)
	}
	return total, gaps
}

// failover SIGKILLs the agent of the host the singleton runs on, waits
// until another host runs it, and starts the killed agent again; it
// returns the new holder.
func (f *singletonFleet) failover(on string) string {
	f.t.Helper()
	f.agents[on].stop(syscall.SIGKILL)
	next := f.waitRunsOn(30*time.Second, on)
	f.start(on, f.agents[on].endpoints)
	return next
}

// sameFleetDocument checks that host's agent serves on /api/v1/fleet the
// document fleet status -o json prints.
func (f *singletonFleet) sameFleetDocument(host string) {
	f.t.Helper()
	r := reconcile.ReadAgentReport(state.At(f.agents[host].state))
	if r == nil || r.Address == "" {
		f.t.Fatalf("%s's agent report names no address: %+v", host, r)
	}
	names := func(r fleet.Report) (hs []string) {
		for _, h := range r.Hosts {
			hs = append(hs, h.Host)
		}
		return hs
	}
	// Read both once every host has joined (the singleton may run on the
	// first before the others write their presence); until then they may
	// differ by a join between the two reads.
	var served, printed fleet.Report
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		served, printed = fleet.Report{}, fleet.Report{}
		resp, err := http.Get("http://" + r.Address + "/api/v1/fleet")
		if err != nil {
			f.t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&served)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			f.t.Fatalf("GET /api/v1/fleet: %s, %v", resp.Status, err)
		}
		// Its exit status says converged or not; the document is the same.
		out, _ := exec.Command(f.bin, "fleet", "status", "--etcd-endpoints", strings.Join(f.endpoints, ","), "--fleet", f.fleet, "-o", "json").Output()
		if err := json.Unmarshal(out, &printed); err != nil {
			f.t.Fatalf("fleet status -o json: %v\n%s", err, out)
		}
		if len(served.Hosts) == len(f.agents) && len(printed.Hosts) == len(f.agents) || time.Now().After(deadline) {
			break
		}
	}
	if served.Fleet != printed.Fleet || !slices.Equal(names(served), names(printed)) || len(served.Hosts) != len(f.agents) ||
		len(served.Singletons) != 1 || len(printed.Singletons) != 1 || served.Singletons[0].Holder != printed.Singletons[0].Holder {
		f.t.Errorf("/api/v1/fleet serves %+v; fleet status -o json prints %+v", served, printed)
	}
}

// TestFleetSingletonSIGKILL: a singleton runs on exactly one of three
// hosts; when its host's agent is SIGKILLed, its supervisor (which
// outlives the agent) stops it on the fence's clock, and another host
// runs it, with no moment of two copies, over several failovers.
func TestFleetSingletonSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agents and kills them")
	}
	t.Parallel()
	f := newSingletonFleet(t, etcdtest.New(t).Endpoints())
	for _, n := range []string{"h1", "h2", "h3"} {
		f.start(n, nil)
	}
	on := f.waitRunsOn(time.Minute)
	f.sameFleetDocument(on)
	failovers := 3 // FLEET_FAILOVERS=20 for the figure of docs/fleet.md
	if v, err := strconv.Atoi(os.Getenv("FLEET_FAILOVERS")); err == nil && v > 0 {
		failovers = v
	}
	for range failovers {
		if h := f.holder(); h != on {
			t.Errorf("the singleton runs on %s, but %s holds it in etcd", on, h)
		}
		on = f.failover(on)
	}
	// The last holder's process runs (its status says so) but may not have
	// written its first tick yet.
	for deadline := time.Now().Add(10 * time.Second); len(f.runs()) <= failovers && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	total, gaps := overlap(f.runs())
	if total > 0 {
		t.Errorf("two copies ran at once for %.3fs in all (runs %+v)", total, f.runs())
	}
	t.Logf("%d failovers: hand-off gaps %v s, overlap %.3f s", failovers, gaps, total)
	if len(gaps) < failovers {
		t.Errorf("runs %+v: want %d, one per holder", f.runs(), failovers+1)
	}
}

// TestFleetSingletonPartition: when the holder's link to etcd is cut (a
// proxy that drops everything, the connections kept open), the holder
// fences itself on its own clock and stops the singleton before etcd lets
// another host hold it: no overlap. Healed, it waits in standby.
func TestFleetSingletonPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agents and cuts their links")
	}
	t.Parallel()
	cl := etcdtest.New(t)
	f := newSingletonFleet(t, cl.Endpoints())
	proxies := map[string][]*etcdtest.Proxy{}
	for _, n := range []string{"h1", "h2", "h3"} {
		proxies[n] = cl.ProxyAll(t)
		f.start(n, etcdtest.URLs(proxies[n]))
	}
	on := f.waitRunsOn(time.Minute)
	for _, p := range proxies[on] {
		p.Cut()
	}
	next := f.waitRunsOn(30*time.Second, on)
	for _, p := range proxies[on] {
		p.Heal()
	}
	if h := f.holder(); h != next {
		t.Errorf("the singleton runs on %s, but %s holds it", next, h)
	}
	// Healed, the old holder is a candidate again, and runs nothing.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, _ := supervise.Read(f.agents[on].state, "single")
		if st != nil && st.State == supervise.Standby && st.Holder == next {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s, healed, is not in standby naming %s: %+v\n%s", on, next, st, f.agents[on].stderr.String())
		}
	}
	total, gaps := overlap(f.runs())
	if total > 0 {
		t.Errorf("two copies ran at once for %.3fs (runs %+v)", total, f.runs())
	}
	t.Logf("partition: hand-off gap %v s, overlap %.3f s", gaps, total)
}
