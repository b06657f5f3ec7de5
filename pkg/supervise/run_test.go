//go:build linux

package supervise

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// TestMain lets this test binary serve as the supervisor it starts.
func TestMain(m *testing.M) {
	testHookRun = refuseMarked
	if len(os.Args) > 1 && os.Args[1] == ShimArg {
		os.Exit(RunShim(os.Args[2:]))
	}
	os.Exit(m.Run())
}

const cleanPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// newSpec is a spec for argv under a fresh state dir; its supervisor and
// processes are stopped when the test ends.
func newSpec(t testing.TB, name string, argv ...string) (string, Spec) {
	t.Helper()
	state := t.TempDir()
	t.Cleanup(func() {
		StopAll(state)
		// The supervisor is this test binary: what it said of a race or a
		// panic (under -race, say) is a failure here.
		if b, _ := os.ReadFile(supervisorLog(state)); bytes.Contains(b, []byte("DATA RACE")) || bytes.Contains(b, []byte("panic:")) {
			t.Errorf("the supervisor failed:\n%s", b)
		}
	})
	logFile, _ := Files(state, name)
	cg, _ := CgroupBase(state)
	if cg != "" {
		cg = filepath.Join(cg, name)
		t.Cleanup(func() { cgroup(cg).kill(time.Second); cgroup(cg).remove() })
	}
	return state, Spec{
		ID: "Process/" + name, Name: name, Command: argv, Env: []string{cleanPath, "HOME=/"}, UID: -1, GID: -1,
		RestartPolicy: Always, StopSignal: syscall.SIGTERM, StopTimeout: 5 * time.Second,
		LogFile: logFile, LogMax: DefaultLogMax, Hash: "h1", Cgroup: cg,
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func running(t testing.TB, state, name string) *Status {
	t.Helper()
	var st *Status
	eventually(t, 10*time.Second, name+" never ran", func() bool {
		st, _ = Read(state, name)
		return st != nil && st.State == Running && st.Process.Alive()
	})
	return st
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// httpOK GETs url: nil when it answers 200.
func httpOK(url string) error {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// withMarker lists the live processes whose command line holds marker
// and, for a state dir given, whose environment carries its tag: other
// tests (of other checkouts too) may run the same commands at once.
func withMarker(marker, state string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(marker)) || !Of(pid).Alive() {
			continue
		}
		if env, _ := os.ReadFile("/proc/" + e.Name() + "/environ"); state != "" && !bytes.Contains(env, []byte("CORTEX_SYNC_UNIT="+stateHash(state)+"/")) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// topmost keeps the processes whose parent is not in the list: a shell's
// fork, before it execs, shows the shell's command line too.
func topmost(pids []int) []int {
	in := map[int]bool{}
	for _, p := range pids {
		in[p] = true
	}
	var out []int
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		if ppid, _ := strconv.Atoi(f[1]); !in[ppid] {
			out = append(out, p)
		}
	}
	return out
}

// TestRestartAtOnce: a process that ran at least minUptime and is killed
// is started again at once, no backoff (how soon is
// BenchmarkKillToServing's figure); the log says so, timestamped.
func TestRestartAtOnce(t *testing.T) {
	state, spec := newSpec(t, "web", "sleep", "3001")
	spec.Backoff = Backoff{MinUptime: 100 * time.Millisecond}
	first, err := Run(state, spec)
	if err != nil {
		t.Fatal(err)
	}
	// Up for longer than minUptime: this is no crash loop.
	eventually(t, 5*time.Second, "uptime", func() bool { return time.Since(first.Started) > 150*time.Millisecond })
	syscall.Kill(first.Process.PID, syscall.SIGKILL)
	var st *Status
	eventually(t, 10*time.Second, "no new process", func() bool {
		st, _ = Read(state, "web")
		return st != nil && st.State == Running && st.Process.PID != first.Process.PID && st.Process.PID != 0
	})
	if st.Restarts != 1 || st.QuickExits != 0 || st.LastExit.Signal != "SIGKILL" {
		t.Errorf("status %+v, want 1 restart, no quick failure, last killed by SIGKILL", st)
	}
	log, _ := os.ReadFile(spec.LogFile)
	if !bytes.Contains(log, []byte("cortex-sync: web: killed by SIGKILL after ")) || !strings.Contains(string(log), "; restarting\n") {
		t.Errorf("the log does not say it restarted at once:\n%s", log)
	}
}

// TestSupervisorDeath: killed, the supervisor takes nothing down — a
// server keeps serving, a process writing output keeps writing (its
// output never went through the supervisor) — and the next one adopts
// both by identity instead of starting copies.
func TestSupervisorDeath(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found")
	}
	port := freePort(t)
	state, web := newSpec(t, "web", "python3", "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1")
	web.Dir = t.TempDir()
	os.WriteFile(filepath.Join(web.Dir, "hello.txt"), []byte("hello\n"), 0o644)
	logFile, _ := Files(state, "loop")
	loop := web
	loop.ID, loop.Name, loop.LogFile, loop.Dir = "Process/loop", "loop", logFile, ""
	loop.Command = []string{"sh", "-c", "while :; do echo tick; sleep 0.01; done"}
	if loop.Cgroup != "" {
		loop.Cgroup = filepath.Join(filepath.Dir(web.Cgroup), "loop")
	}
	if _, err := Run(state, web); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(state, loop); err != nil {
		t.Fatal(err)
	}
	get := func() error { return httpOK(fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port)) }
	eventually(t, 10*time.Second, "the server never answered", func() bool { return get() == nil })
	w, l := running(t, state, "web"), running(t, state, "loop")
	if err := w.Shim.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w.Shim.WaitGone(5 * time.Second)
	// Until the loop has written 100 lines more (a broken output pipe
	// killed a shell loop at its next write, within 1s), the server
	// serving throughout.
	lines := func() int { b, _ := os.ReadFile(logFile); return bytes.Count(b, []byte("tick\n")) }
	before := lines()
	eventually(t, 30*time.Second, "the loop's output stopped when its supervisor died", func() bool {
		if err := get(); err != nil {
			t.Fatalf("with its supervisor dead, the server does not serve: %v", err)
		}
		return lines() >= before+100
	})
	if !w.Process.Alive() || !l.Process.Alive() {
		t.Fatal("a process died with its supervisor")
	}
	// The next supervisor adopts them: same processes, one of each.
	for _, spec := range []Spec{web, loop} {
		st, err := Run(state, spec)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Adopted || st.Process != map[string]Identity{"web": w.Process, "loop": l.Process}[spec.Name] {
			t.Errorf("%s: %+v, want pid %d adopted", spec.Name, st, w.Process.PID)
		}
	}
	if n := len(topmost(withMarker("while :; do echo tick", state))); n != 1 {
		t.Errorf("%d loops run, want 1", n)
	}
	// Adopted, a death is still seen and acted on at once.
	syscall.Kill(l.Process.PID, syscall.SIGKILL)
	eventually(t, 5*time.Second, "the adopted loop was not restarted", func() bool {
		st, _ := Read(state, "loop")
		return st != nil && st.State == Running && st.Process.PID != l.Process.PID && st.Process.Alive()
	})
	if err := get(); err != nil {
		t.Fatal(err)
	}
}

// TestContainTree: a process tree that left its process group (setsid) is
// stopped with it — by its cgroup where one can be made, else by the tag
// it carries in its environment.
func TestContainTree(t *testing.T) {
	for _, mode := range []string{"cgroup", "process group"} {
		t.Run(mode, func(t *testing.T) {
			state, spec := newSpec(t, "tree", "sh", "-c", "setsid sleep 3011 & exec sleep 30011")
			if mode == "cgroup" && spec.Cgroup == "" {
				t.Skip("no writable cgroup v2 hierarchy here")
			}
			if mode != "cgroup" {
				spec.Cgroup = ""
			}
			if _, err := Run(state, spec); err != nil {
				t.Fatal(err)
			}
			st := running(t, state, "tree")
			if mode == "cgroup" && st.Containment != "cgroup "+spec.Cgroup || mode != "cgroup" && !strings.HasPrefix(st.Containment, "process group") {
				t.Errorf("containment %q", st.Containment)
			}
			eventually(t, 5*time.Second, "the escaped child never ran", func() bool { return len(withMarker("sleep\x003011", state)) == 1 })
			if err := Remove(state, "tree", syscall.SIGTERM, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if pids := withMarker("sleep\x003011", state); len(pids) != 0 {
				t.Fatalf("the child that left the group is still running: %v", pids)
			}
			if len(withMarker("sleep\x0030011", state)) != 0 {
				t.Fatal("the process is still running")
			}
			if spec.Cgroup != "" {
				if _, err := os.Stat(spec.Cgroup); !os.IsNotExist(err) {
					t.Errorf("the cgroup %s is left: %v", spec.Cgroup, err)
				}
			}
			for _, f := range []string{spec.LogFile, statusFile(procsDir(state), "tree"), specFile(procsDir(state), "tree")} {
				if _, err := os.Stat(f); !os.IsNotExist(err) {
					t.Errorf("%s is left after the process was removed", f)
				}
			}
		})
	}
}

// TestResources: limits are written to the cgroup where the controllers
// are available; where they are not, the status says which are missing.
func TestResources(t *testing.T) {
	state, spec := newSpec(t, "limited", "sleep", "3021")
	if spec.Cgroup == "" {
		t.Skip("no writable cgroup v2 hierarchy here")
	}
	spec.Resources = Resources{Memory: 64 << 20, MilliCPU: 500, Tasks: 50}
	if _, err := Run(state, spec); err != nil {
		t.Fatal(err)
	}
	st := running(t, state, "limited")
	want := map[string]string{"memory": "memory.max=67108864", "cpu": "cpu.max=50000 100000", "pids": "pids.max=50"}
	var missing []string
	for ctl, kv := range want {
		file, value, _ := strings.Cut(kv, "=")
		b, err := os.ReadFile(filepath.Join(spec.Cgroup, file))
		if err != nil {
			missing = append(missing, ctl)
			continue
		}
		if got := strings.TrimSpace(string(b)); got != value {
			t.Errorf("%s = %q, want %q", file, got, value)
		}
	}
	if len(missing) > 0 && !strings.Contains(st.Containment, "limits not applied: no ") {
		t.Errorf("controllers %v are missing and the status does not say so: %q", missing, st.Containment)
	}
	t.Logf("containment: %s", st.Containment)
}

// TestProbeRates: a readiness probe that never passes is polled fast only
// at first, then every period (it sent 213 requests in 5s with a 1s
// period); an exec one no more (it burnt a third of a core). No run comes
// sooner after the one before than the schedule allows: a fifth of the
// time since the probe began, from 10ms up to the period. (A loaded
// machine only makes the gaps longer.)
func TestProbeRates(t *testing.T) {
	var mu sync.Mutex
	var hits []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits = append(hits, time.Now())
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer srv.Close()
	const period = time.Second
	state, spec := newSpec(t, "unready", "sleep", "3031")
	spec.Readiness = &health.Probe{HTTP: &health.HTTPProbe{URL: srv.URL + "/ready"}, Period: resource.Duration(period)}
	count := filepath.Join(t.TempDir(), "count")
	execSpec := spec
	execSpec.Name, execSpec.ID, execSpec.Cgroup = "unready-exec", "Process/unready-exec", ""
	execSpec.LogFile, _ = Files(state, "unready-exec")
	execSpec.Readiness = &health.Probe{Exec: &health.ExecProbe{Command: []string{"sh", "-c", "date +%s%N >> " + count + "; exit 1"}}, Period: resource.Duration(period)}
	for _, s := range []Spec{spec, execSpec} {
		if _, err := Run(state, s); err != nil {
			t.Fatal(err)
		}
	}
	var st *Status
	eventually(t, 10*time.Second, "the probe's error never showed", func() bool {
		st, _ = Read(state, "unready")
		return st != nil && st.Probe != ""
	})
	if st.Ready || st.Probe != "readiness probe http GET "+srv.URL+"/ready: status 404" {
		t.Errorf("status %+v, want not ready with the probe's error", st)
	}
	execRuns := func() []time.Time {
		b, _ := os.ReadFile(count)
		var out []time.Time
		for _, f := range strings.Fields(string(b)) {
			if ns, err := strconv.ParseInt(f, 10, 64); err == nil {
				out = append(out, time.Unix(0, ns))
			}
		}
		return out
	}
	httpRuns := func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), hits...)
	}
	// Until each has run a while into its every-period regime (5 periods
	// in, the schedule reaches the period).
	spans := func(runs []time.Time) bool { return len(runs) > 1 && runs[len(runs)-1].Sub(runs[0]) > 7*period }
	eventually(t, 30*time.Second, "the probes did not run for 7s", func() bool { return spans(httpRuns()) && spans(execRuns()) })
	for probe, runs := range map[string][]time.Time{"http": httpRuns(), "exec": execRuns()} {
		t.Logf("%s probe: %d runs in %s", probe, len(runs), runs[len(runs)-1].Sub(runs[0]).Round(time.Millisecond))
		for i := 1; i < len(runs); i++ {
			least := min(period, max(10*time.Millisecond, runs[i-1].Sub(runs[0])/5))
			if gap := runs[i].Sub(runs[i-1]); gap < least-2*time.Millisecond {
				t.Errorf("the %s probe's run %d came %s after the one before, %s into its polling; want at least %s", probe, i, gap, runs[i-1].Sub(runs[0]), least)
			}
		}
	}
}

// TestLivenessThreshold: a liveness probe that fails now and then (a slow
// answer under load) never restarts the process; failureThreshold
// failures in a row do, and the status says which probe and why.
func TestLivenessThreshold(t *testing.T) {
	dir := t.TempDir()
	flip, runs := filepath.Join(dir, "flip"), filepath.Join(dir, "runs")
	state, spec := newSpec(t, "live", "sleep", "3041")
	// Fails every other time: never twice in a row.
	spec.Liveness = &health.Probe{
		Exec:   &health.ExecProbe{Command: []string{"sh", "-c", "echo >> " + runs + "; if [ -e " + flip + " ]; then rm " + flip + "; exit 1; else touch " + flip + "; fi"}},
		Period: resource.Duration(20 * time.Millisecond), FailureThreshold: 2,
	}
	first, err := Run(state, spec)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the probe did not run 40 times", func() bool {
		b, _ := os.ReadFile(runs)
		return bytes.Count(b, []byte("\n")) >= 40 // half of them failures
	})
	if st, _ := Read(state, "live"); st.Process != first.Process || st.Restarts != 0 {
		t.Fatalf("restarted by single failures: %+v", st)
	}
	// Now it fails for good.
	spec.Liveness.Exec.Command = []string{"sh", "-c", "echo no answer; exit 1"}
	spec.Hash = "h2"
	if _, err := Run(state, spec); err != nil {
		t.Fatal(err)
	}
	var st *Status
	eventually(t, 5*time.Second, "never stopped for its liveness", func() bool {
		st, _ = Read(state, "live")
		return st.LastExit != nil && st.LastExit.Liveness
	})
	want := `liveness probe exec ["sh" "-c" "echo no answer; exit 1"] failed 2 times in a row: exit status 1: no answer`
	if st.LastExit.Reason != want {
		t.Errorf("reason %q, want %q", st.LastExit.Reason, want)
	}
}

// TestCapLog: a log past its maximum is copied to .1 and truncated in
// place, so a writer holding it O_APPEND goes on at its new start.
func TestCapLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.log")
	w, err := openLog(p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Write(bytes.Repeat([]byte("a"), 2000))
	if err := CapLog(p, 1000); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("after\n"))
	got, _ := os.ReadFile(p)
	old, _ := os.ReadFile(p + ".1")
	if string(got) != "after\n" || len(old) != 2000 {
		t.Fatalf("log %q and .1 of %d bytes; want the new line alone and 2000 bytes kept", got, len(old))
	}
}
