package fleetagent

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/internal/syncbuf"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// Real agents in this process, each on its own root and state dir, on a
// real git daemon's branch and a real 3-member etcd; their processes are
// real, under the re-executed supervisor (this test binary). What the
// processes write with O_APPEND to one log, with the time they start, is
// what the rollout's order is read from.

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.ShimArg {
		os.Exit(supervise.RunShim(os.Args[2:]))
	}
	code := m.Run()
	etcdtest.StopShared()
	os.Exit(code)
}

// fixture is a fleet: a repository, an etcd cluster, the hosts' log.
type fixture struct {
	t         testing.TB
	repo      *gittest.Repo
	url       string
	endpoints []string
	fleet     string
	log       string // the processes write here
	rollout   string // fleet.yaml's rollout: line
	rules     string // fleet.yaml's rules before the last, match: {} (windows_test.go)
	noProbe   bool   // a ready web process has no readiness probe
	defaults  bool   // the agents keep the default debounce and TTLs
	mu        sync.Mutex
	hosts     map[string]*host
}

// fixtures numbers the fixtures: each its own fleet on the shared
// cluster, under -count too.
var fixtures atomic.Int64

func newFixture(t testing.TB, endpoints []string, rollout string) *fixture {
	f := &fixture{t: t, repo: gittest.NewRepo(t), endpoints: endpoints, rollout: rollout, hosts: map[string]*host{},
		fleet: fmt.Sprintf("t-%s-%d", strings.ToLower(strings.NewReplacer("/", "-", " ", "-", "_", "-").Replace(t.Name())), fixtures.Add(1)), log: filepath.Join(t.TempDir(), "starts.log")}
	f.url, _ = f.repo.Daemon(t)
	return f
}

// version commits the fleet at version v: a config file and a process
// that restarts on it and logs its start; the process's readiness probe
// passes when ready; singleton adds a singleton that logs a tick every
// 20 ms while it runs.
func (f *fixture) version(v string, ready bool, singleton bool) string {
	probe := "true"
	if !ready {
		probe = "false"
	}
	readiness := fmt.Sprintf("  readinessProbe: {exec: {command: [%q]}, period: 100ms}\n", probe)
	if f.noProbe && ready {
		readiness = "" // healthy while it runs: no probe's execs
	}
	files := map[string]*string{
		"fleet.yaml": gittest.S(fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: Fleet\nmetadata: {name: %s}\nspec:\n  hosts:\n%s    - match: {}\n      paths: [base]\n  rollout: %s\n", f.fleet, f.rules, f.rollout)),
		"base/app.yaml": gittest.S(fmt.Sprintf(`apiVersion: cortex-sync/v1alpha1
kind: File
metadata: {name: conf}
spec: {path: /etc/app.conf, content: "%s\n"}
---
apiVersion: cortex-sync/v1alpha1
kind: Process
metadata: {name: web}
spec:
  command: [sh, -c, 'echo "$(date +%%s.%%N) start $CORTEX_SYNC_ROOT %s" >> %s; exec sleep 100000']
  restartOn: [File/conf]
  stopTimeout: 2s
%s`, v, v, f.log, readiness)),
		"base/single.yaml": nil,
	}
	if singleton {
		files["base/single.yaml"] = gittest.S(fmt.Sprintf(`apiVersion: cortex-sync/v1alpha1
kind: Process
metadata: {name: single}
spec:
  singleton: true
  stopTimeout: 1s
  command: [sh, -c, 'while :; do echo "$(date +%%s.%%N) tick $CORTEX_SYNC_ROOT" >> %s; sleep 0.02; done']
`, f.log))
	}
	return "main@sha1:" + f.repo.Commit(v, files)
}

// host is one agent of the fleet.
type host struct {
	f           *fixture
	name        string
	root, state string
	log         *syncbuf.Buffer
	gate        *countingGate
	events      *recorder        // what its agent told, across restarts
	clock       func() time.Time // the deploy windows' clock; nil: the time
	a           *agent.Agent
	link        *Link
	cancel      context.CancelFunc
	done        chan error
}

// start starts the agent of host name (a new one, or one stopped before,
// on its root and state dir).
func (f *fixture) start(name string) *host {
	f.t.Helper()
	f.mu.Lock()
	h := f.hosts[name]
	if h == nil {
		h = &host{f: f, name: name, root: f.t.TempDir(), state: f.t.TempDir(), log: &syncbuf.Buffer{}, events: &recorder{}}
		f.hosts[name] = h
		f.t.Cleanup(func() { h.stop(); supervise.StopAll(h.state) })
	}
	f.mu.Unlock()
	logger := slog.New(slog.NewTextHandler(h.log, &slog.HandlerOptions{Level: slog.LevelInfo})).With("host", name)
	opts := Options{Config: fleet.Config{Endpoints: f.endpoints, Fleet: f.fleet, RequestTimeout: 2 * time.Second},
		Host: resource.Host{Name: name}, StateDir: h.state, PresenceTTL: 2 * time.Second, Debounce: 100 * time.Millisecond,
		SingletonTTL: 2 * time.Second, Log: logger}
	if f.defaults {
		opts.PresenceTTL, opts.Debounce, opts.SingletonTTL = 0, 0, 0
	}
	link, err := New(opts)
	if err != nil {
		f.t.Fatal(err)
	}
	h.gate = &countingGate{}
	h.link = link
	h.a = agent.New(agent.Options{
		Engine:   reconcile.Config{Root: h.root, StateDir: h.state, Concurrency: 2, LockTimeout: 10 * time.Second, Host: resource.Host{Name: name}},
		Source:   &source.Git{URL: f.url, Branch: "main", Cache: state.At(filepath.Join(h.state, "cache")), Timeout: 20 * time.Second},
		Interval: time.Hour, DriftInterval: time.Hour, SelfHeal: true, Prune: true,
		Revisions:     reconcile.RevisionPolicy{MinReady: 30 * time.Second, ProgressDeadline: time.Hour},
		RevisionGates: []reconcile.RevisionGate{h.gate},
		Fleet:         link, Log: logger, Events: h.events, WindowClock: h.clock,
	})
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.a.Run(ctx) }()
	return h
}

// stop stops the agent and leaves the fleet, as SIGTERM does: its
// processes run on, its singletons stop.
func (h *host) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	if err := <-h.done; err != nil {
		h.f.t.Error(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h.link.Close(ctx)
	h.cancel = nil
}

// fetch has the agent fetch now, as a webhook does.
func (h *host) fetch() { h.a.Reconcile(agent.TriggerWebhook) }

func (h *host) status() *agent.Status { return h.a.Status(context.Background()) }

// waitFor polls cond until it holds, failing the test after limit with the
// host's log.
func (h *host) waitFor(limit time.Duration, what string, cond func() bool) {
	h.f.t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			st := h.status()
			h.f.t.Fatalf("%s: after %s, %s is not so (revision %s, agent %+v)\nlog:\n%s", h.name, limit, what, st.Revision, st.Agent, h.log.String())
		}
	}
}

// good waits until rev is the host's last good revision.
func (h *host) good(rev string, limit time.Duration) {
	h.f.t.Helper()
	h.waitFor(limit, rev+" good", func() bool {
		st := h.status()
		return st.LastGood != nil && st.LastGood.Revision == rev
	})
}

// start is one process start the log recorded.
type start struct {
	at   float64 // seconds since the epoch, as the process said
	root string
	v    string
}

// starts reads the process starts of version v, in order.
func (f *fixture) starts(v string) []start {
	var out []start
	b, _ := os.ReadFile(f.log)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) != 4 || w[1] != "start" || w[3] != v {
			continue
		}
		at, _ := strconv.ParseFloat(w[0], 64)
		out = append(out, start{at: at, root: w[2], v: w[3]})
	}
	slices.SortFunc(out, func(a, b start) int { return cmp.Compare(a.at, b.at) })
	return out
}

// hostOf names the host whose root a process ran under.
func (f *fixture) hostOf(root string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for n, h := range f.hosts {
		if h.root == root {
			return n
		}
	}
	return root
}

// read is the fleet as fleet status reads it.
func (f *fixture) read() *fleet.Report {
	f.t.Helper()
	c, err := fleet.Dial(fleet.Config{Endpoints: f.endpoints, Fleet: f.fleet, RequestTimeout: 2 * time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Read(context.Background(), "")
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// client is a client of the fleet, for holds and rollout controls.
func (f *fixture) client() *fleet.Client {
	c, err := fleet.Dial(fleet.Config{Endpoints: f.endpoints, Fleet: f.fleet, RequestTimeout: 2 * time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// countingGate counts what the engine asks its revision gates.
type countingGate struct {
	mu     sync.Mutex
	admits []string
}

func (g *countingGate) Admit(_ context.Context, rev string) error {
	g.mu.Lock()
	g.admits = append(g.admits, rev)
	g.mu.Unlock()
	return nil
}

func (g *countingGate) Judged(string, state.Verdict, string) {}

func (g *countingGate) asked() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.admits)
}

// recorder is an events.Sink that keeps what it is told.
type recorder struct {
	mu  sync.Mutex
	got []events.Event
}

func (r *recorder) Emit(e events.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, e)
}

// told is the first event of reason about revision rev ("": any).
func (r *recorder) told(reason events.Reason, rev string) *events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.got {
		if e.Reason == reason && (rev == "" || e.Revision == rev) {
			return &e
		}
	}
	return nil
}

// waitTold waits for an event of reason about rev on h.
func (h *host) waitTold(reason events.Reason, rev string) events.Event {
	h.f.t.Helper()
	var e *events.Event
	h.waitFor(30*time.Second, "told "+string(reason), func() bool {
		e = h.events.told(reason, rev)
		return e != nil
	})
	return *e
}
