package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/internal/syncbuf"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// The last-known-good gate, end to end: an agent following a branch of a
// real git daemon, real processes, the real filesystem. minReady and the
// progress deadline are short; nothing here asserts on time.

// lkgHost is an agent on a git daemon's branch, with its root, state dir,
// registry and log.
type lkgHost struct {
	t                  testing.TB
	repo               *gittest.Repo
	url                string
	root, stateDir     string
	reg                *prometheus.Registry
	log                *syncbuf.Buffer
	a                  *agent.Agent
	minReady, deadline time.Duration
	onFailure          reconcile.OnFailure
	checks             []reconcile.HostCheck
	gates              []reconcile.RevisionGate
	stop               func()
	handler            slog.Handler // the agent's log; nil: text into log
	files              map[string]*string
	conf               string
}

func newLKGHost(t testing.TB) *lkgHost {
	h := &lkgHost{t: t, repo: gittest.NewRepo(t), root: t.TempDir(), stateDir: t.TempDir(), log: &syncbuf.Buffer{},
		minReady: 500 * time.Millisecond, deadline: 3 * time.Second, files: map[string]*string{}}
	h.url, _ = h.repo.Daemon(t)
	h.conf = filepath.Join(h.root, "etc/app.conf")
	t.Cleanup(func() {
		if h.stop != nil {
			h.stop()
		}
		stopGit(t, h)
	})
	return h
}

// gitSource is the agent's source: the daemon's main branch, cached in
// the state dir.
func gitSource(url, stateDir string) *source.Git {
	return &source.Git{URL: url, Branch: "main", Cache: state.At(filepath.Join(stateDir, "cache")), Timeout: 20 * time.Second}
}

func (h *lkgHost) start() {
	h.t.Helper()
	h.reg = agent.NewRegistry()
	h.a = agent.New(agent.Options{
		Engine:   reconcile.Config{Root: h.root, StateDir: h.stateDir, Concurrency: 2, LockTimeout: 10 * time.Second},
		Source:   gitSource(h.url, h.stateDir),
		Interval: time.Hour, DriftInterval: time.Hour, SelfHeal: true, Prune: true,
		Revisions:     reconcile.RevisionPolicy{MinReady: h.minReady, ProgressDeadline: h.deadline, OnFailure: h.onFailure, Checks: h.checks},
		RevisionGates: h.gates,
		Metrics:       agent.NewMetrics(h.reg),
		Log:           slog.New(cmpHandler(h.handler, slog.NewTextHandler(h.log, nil))),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.a.Run(ctx) }()
	h.stop = func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Error(err)
		}
		h.stop = nil
	}
}

func cmpHandler(h, def slog.Handler) slog.Handler {
	if h != nil {
		return h
	}
	return def
}

// startGood starts the agent and waits until rev, its first revision, is
// good.
func (h *lkgHost) startGood(rev string) {
	h.t.Helper()
	h.start()
	h.waitFor(2*time.Minute, "the first revision good", func() bool {
		st := h.status()
		return st.LastGood != nil && st.LastGood.Revision == rev
	})
}

// stopGit stops what the repository's last revision supervises: an empty
// desired set, pruned.
func stopGit(t testing.TB, h *lkgHost) {
	ctx := context.Background()
	s, err := reconcile.Open(ctx, reconcile.Config{Root: h.root, StateDir: h.stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}, nil, true)
	if err != nil {
		t.Error(err)
		return
	}
	defer s.Close()
	empty := t.TempDir()
	d, err := reconcile.Load(ctx, &source.Dir{Dir: empty}, s.Config.Manifests(), nil)
	if err != nil {
		t.Error(err)
		return
	}
	defer d.Close()
	s.SetDesired(d)
	s.Policy = reconcile.Policy{Prune: true, AllowEmpty: true, AllowSourceChange: true}
	if _, err := s.Sync(ctx, s.Plan(ctx), state.Retention{}); err != nil {
		t.Error(err)
	}
}

// commit commits the manifests of a version and returns its revision.
func (h *lkgHost) commit(msg string, files map[string]*string) string {
	h.t.Helper()
	return "main@sha1:" + h.repo.Commit(msg, files)
}

// fetch asks the agent to fetch now, as a webhook does.
func (h *lkgHost) fetch() { h.a.Reconcile(agent.TriggerWebhook) }

// status is the agent's status document.
func (h *lkgHost) status() *agent.Status { return h.a.Status(context.Background()) }

// waitFor waits up to limit for cond, saying what it waited for.
func (h *lkgHost) waitFor(limit time.Duration, what string, cond func() bool) {
	h.t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			st := h.status()
			var res []string
			for _, r := range st.Resources {
				res = append(res, fmt.Sprintf("%s %s %s: %s", r.ID, r.Sync, r.Health, r.Reason))
			}
			h.t.Fatalf("after %s: %s is not so\nrevision %s, verdict %+v, last good %+v, on rollback %+v, agent %+v\nresources:\n  %s\nlog:\n%s",
				limit, what, st.Revision, st.Verdict, st.LastGood, st.OnRollback, st.Agent, strings.Join(res, "\n  "), h.log.String())
		}
	}
}

// snapshot is the state dir's snapshot as saved.
func (h *lkgHost) snapshot() *state.Snapshot {
	h.t.Helper()
	snap, err := state.At(h.stateDir).Load()
	if err != nil {
		h.t.Fatal(err)
	}
	return snap
}

func read(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return string(b)
}

func (h *lkgHost) resource(id string) *reconcile.ResourceStatus {
	for _, r := range h.status().Resources {
		if r.ID == id {
			return &r
		}
	}
	return nil
}

// version writes the manifests: a config file, a knowledge base tree, and
// a process whose readiness probe passes or not.
func version(files map[string]*string, v string, ready bool) {
	probe := "true"
	if !ready {
		probe = "false"
	}
	files["conf.yaml"] = gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: conf}\nspec: {path: /etc/app.conf, source: app.conf}\n")
	files["app.conf"] = gittest.S("version " + v + "\n")
	files["kb.yaml"] = gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n")
	files["web.yaml"] = gittest.S(fmt.Sprintf(`apiVersion: cortex-sync/v1alpha1
kind: Process
metadata: {name: web}
spec:
  command: [sleep, "1%s"]
  readinessProbe:
    exec: {command: [%q]}
    period: 1s
`, strings.ReplaceAll(v, ".", ""), probe))
}

// kbFiles is the knowledge base of a version.
func kbFiles(files map[string]*string, names ...string) {
	for k := range files {
		if strings.HasPrefix(k, "kb/") {
			files[k] = nil
		}
	}
	for _, n := range names {
		files["kb/"+n] = gittest.S("# " + n + "\n")
	}
}

// tree lists the files below dir with their content.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out[rel] = read(p)
		}
		return nil
	})
	return out
}

func historyOf(snap *state.Snapshot, rev string) []state.Applied {
	var out []state.Applied
	for _, a := range snap.History {
		if a.Revision == rev {
			out = append(out, a)
		}
	}
	return out
}

// fetches counts the source fetches the agent made.
func fetches(reg *prometheus.Registry) uint64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "cortexsync_source_fetch_duration_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// TestAgentRollsBackABadRevision: a commit that breaks a process's
// readiness (and changes a config file and a knowledge base) is applied,
// judged bad at the progress deadline, and rolled back whole: the
// previous bytes on disk, the previous process running and ready. Polls
// and webhooks do not apply it again; retry does (and it is rolled back
// again); a fixing commit rolls forward and is good.
func TestAgentRollsBackABadRevision(t *testing.T) {
	h := newLKGHost(t)
	version(h.files, "1", true)
	kbFiles(h.files, "a.md", "b.md")
	good := h.commit("first", h.files)
	h.startGood(good)
	kbV1 := tree(t, filepath.Join(h.root, "srv/kb"))
	if len(kbV1) != 2 || read(h.conf) != "version 1\n" {
		t.Fatalf("version 1 on disk: %v, conf %q", kbV1, read(h.conf))
	}

	version(h.files, "2", false)
	kbFiles(h.files, "a.md", "c.md")
	h.files["kb/a.md"] = gittest.S("# a, rewritten\n")
	bad := h.commit("break web's readiness", h.files)
	h.fetch()
	h.waitFor(20*time.Second, "the bad revision applied", func() bool { return read(h.conf) == "version 2\n" })
	h.waitFor(30*time.Second, "rolled back to the first revision", func() bool {
		st := h.status()
		web := h.resource("Process/web")
		return st.OnRollback != nil && st.OnRollback.Revision == good && st.Revision == good &&
			web != nil && web.Health == health.Healthy && read(h.conf) == "version 1\n"
	})
	if got := tree(t, filepath.Join(h.root, "srv/kb")); fmt.Sprint(got) != fmt.Sprint(kbV1) {
		t.Fatalf("knowledge base after the rollback: %v, want %v", got, kbV1)
	}
	st := h.status()
	if st.Converged() || st.OnRollback.Head != bad || st.Conditions.Ready {
		t.Fatalf("status on a rollback: converged %v, ready %v, held from %q", st.Converged(), st.Conditions.Ready, st.OnRollback.Head)
	}
	if web := h.resource("Process/web"); web.Runtime == nil || web.Runtime.PID == 0 {
		t.Fatalf("web after the rollback: %+v", web)
	}
	h.waitFor(10*time.Second, "the rollback in the saved history", func() bool {
		b := historyOf(h.snapshot(), bad)
		return len(b) == 1 && b[0].Refused
	})
	snap := h.snapshot()
	b := historyOf(snap, bad)[0]
	if b.Verdict != state.Bad || b.RolledBackTo != good || !strings.Contains(b.Reason, "Process/web is Progressing") || b.Subject != "break web's readiness" {
		t.Fatalf("the bad revision's history: %+v", b)
	}
	g := historyOf(snap, good)
	if len(g) != 2 || g[0].Verdict != state.Good || g[1].RollbackFrom != bad {
		t.Fatalf("the good revision's history: %+v", g)
	}
	if n := counter(h.reg, "cortexsync_rollbacks_total"); n != 1 {
		t.Fatalf("%v rollbacks counted", n)
	}
	if v := testutil.ToFloat64(gauge(h.reg, "cortexsync_rolled_back")); v != 1 {
		t.Fatalf("cortexsync_rolled_back %v", v)
	}
	if !strings.Contains(h.log.String(), "revision bad; rolling back to the last good revision") {
		t.Fatalf("no decision logged:\n%s", h.log.String())
	}

	// Polls and webhooks: fetched, and not applied again.
	for _, trigger := range []agent.Trigger{agent.TriggerInterval, agent.TriggerWebhook, agent.TriggerInterval} {
		n := fetches(h.reg)
		h.a.Reconcile(trigger)
		h.waitFor(10*time.Second, "a fetch", func() bool { return fetches(h.reg) > n })
	}
	h.waitFor(5*time.Second, "the bad revision reported held back", func() bool {
		hb := h.status().Agent.HeldBack
		return hb != nil && hb.Revision == bad
	})
	if len(historyOf(h.snapshot(), bad)) != 1 || read(h.conf) != "version 1\n" {
		t.Fatalf("the refused revision was applied again: conf %q", read(h.conf))
	}

	// retry forces it: applied, bad again, rolled back again.
	rev, err := h.a.Retry(context.Background())
	if err != nil || rev != bad {
		t.Fatalf("retry: %q, %v", rev, err)
	}
	h.waitFor(30*time.Second, "the retried revision rolled back again", func() bool {
		return counter(h.reg, "cortexsync_rollbacks_total") == 2 && h.status().Revision == good
	})
	if n := len(historyOf(h.snapshot(), bad)); n < 1 {
		t.Fatalf("retry left no history")
	}

	// A fixing commit rolls forward, and is good.
	version(h.files, "3", true)
	fixed := h.commit("fix web", h.files)
	h.fetch()
	h.waitFor(30*time.Second, "the fixing commit good", func() bool {
		st := h.status()
		return st.LastGood != nil && st.LastGood.Revision == fixed && st.OnRollback == nil
	})
	if read(h.conf) != "version 3\n" {
		t.Fatalf("conf %q", read(h.conf))
	}
	if v := testutil.ToFloat64(gauge(h.reg, "cortexsync_rolled_back")); v != 0 {
		t.Fatalf("cortexsync_rolled_back %v after rolling forward", v)
	}
	if n, _ := testutil.GatherAndCount(h.reg, "cortexsync_revision_good_seconds"); n != 1 {
		t.Fatalf("cortexsync_revision_good_seconds: %d series", n)
	}
	if problems, err := testutil.GatherAndLint(h.reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
}

// gauge is a single-series gauge of reg.
func gauge(reg *prometheus.Registry, name string) prometheus.Collector {
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == name {
				ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, "", nil, nil), prometheus.GaugeValue, mf.GetMetric()[0].GetGauge().GetValue())
			}
		}
	})
}

type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

// TestAgentRollsBackAFailingHostCheck: a commit that changes nothing with
// health but closes the port a host check connects to is rolled back.
func TestAgentRollsBackAFailingHostCheck(t *testing.T) {
	h := newLKGHost(t)
	port := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	open, other := port(), port()
	h.checks = []reconcile.HostCheck{{Name: "api", TCP: &health.TCPProbe{Address: open}}}
	listener := func(addr string) *string {
		return gittest.S(fmt.Sprintf(`apiVersion: cortex-sync/v1alpha1
kind: Process
metadata: {name: api}
spec:
  command: [python3, -c, "import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', %s)); s.listen(); time.sleep(100000)"]
`, addr[strings.LastIndexByte(addr, ':')+1:]))
	}
	h.files["api.yaml"] = listener(open)
	good := h.commit("api on its port", h.files)
	h.startGood(good)
	h.files["api.yaml"] = listener(other)
	bad := h.commit("move the api", h.files)
	h.fetch()
	h.waitFor(30*time.Second, "rolled back", func() bool {
		st := h.status()
		return st.OnRollback != nil && st.OnRollback.Head == bad && st.Revision == good
	})
	h.waitFor(10*time.Second, "the check's port open again", func() bool {
		c, err := net.Dial("tcp", open)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	h.waitFor(10*time.Second, "the verdict saved", func() bool {
		b := historyOf(h.snapshot(), bad)
		return len(b) == 1 && b[0].Verdict == state.Bad
	})
	if b := historyOf(h.snapshot(), bad)[0]; !strings.HasPrefix(b.Reason, "check api fails (tcp "+open+")") {
		t.Fatalf("reason: %q", b.Reason)
	}
	if !strings.Contains(h.log.String(), "failing=\"check api\"") {
		t.Fatalf("the decision does not name the check:\n%s", h.log.String())
	}
	if n := counterWith(h.reg, "cortexsync_rollbacks_total", "host_check"); n != 1 {
		t.Fatalf("rollbacks{reason=host_check} = %v", n)
	}
}

// counterWith is the value of a counter family's series with label value v.
func counterWith(reg *prometheus.Registry, name, v string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == v && m.GetGauge() != nil {
					return m.GetGauge().GetValue()
				}
				if l.GetValue() == v {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// TestAgentHaltsOnABadRevision: onFailure halt keeps the bad revision in
// place and reports it; nothing is rolled back.
func TestAgentHaltsOnABadRevision(t *testing.T) {
	h := newLKGHost(t)
	h.onFailure = reconcile.OnFailureHalt
	version(h.files, "1", true)
	kbFiles(h.files, "a.md")
	good := h.commit("first", h.files)
	h.startGood(good)
	version(h.files, "2", false)
	bad := h.commit("break web", h.files)
	h.fetch()
	h.waitFor(30*time.Second, "the bad revision judged", func() bool {
		v := h.status().Verdict
		return v != nil && v.Revision == bad && v.Verdict == state.Bad
	})
	st := h.status()
	if st.OnRollback != nil || st.Converged() || st.LastGood.Revision != good || read(h.conf) != "version 2\n" {
		t.Fatalf("halted: on rollback %v, converged %v, last good %v, conf %q", st.OnRollback, st.Converged(), st.LastGood, read(h.conf))
	}
	if n := counter(h.reg, "cortexsync_rollbacks_total"); n != 0 {
		t.Fatalf("%v rollbacks in halt mode", n)
	}
	if !strings.Contains(h.log.String(), "revision bad; the host stays on it") || !strings.Contains(h.log.String(), "halted on it (onFailure: halt)") {
		t.Fatalf("no decision logged:\n%s", h.log.String())
	}
}

// slot is a revision gate from outside (a fleet's rollout slot): it lets
// in only what it was told to, and notes the verdicts it hears.
type slot struct {
	mu     sync.Mutex
	open   map[string]bool
	asked  []string
	judged []string
}

func (s *slot) Admit(_ context.Context, rev string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, rev)
	if !s.open[rev] {
		return errors.New("no rollout slot")
	}
	return nil
}

func (s *slot) Judged(rev string, v state.Verdict, _ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.judged = append(s.judged, rev+" "+string(v))
}

func (s *slot) let(rev string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open[rev] = true
}

func (s *slot) heard() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.judged)
}

// TestAgentRevisionGate: a gate from outside keeps a new revision out
// until it lets it in, while the host goes on healing the revision it is
// on; it hears each verdict.
func TestAgentRevisionGate(t *testing.T) {
	h := newLKGHost(t)
	g := &slot{open: map[string]bool{}}
	h.gates = []reconcile.RevisionGate{g}
	version(h.files, "1", true)
	kbFiles(h.files, "a.md")
	first := h.commit("first", h.files)
	h.start()
	h.waitFor(20*time.Second, "the first revision held back", func() bool {
		hb := h.status().Agent
		return hb != nil && hb.HeldBack != nil && hb.HeldBack.Revision == first
	})
	if _, err := os.Stat(h.conf); err == nil {
		t.Fatal("a revision the gate held was applied")
	}
	g.let(first)
	h.fetch()
	h.waitFor(30*time.Second, "the first revision good", func() bool {
		st := h.status()
		return st.LastGood != nil && st.LastGood.Revision == first
	})
	version(h.files, "2", true)
	second := h.commit("second", h.files)
	h.fetch()
	h.waitFor(20*time.Second, "the second revision held back", func() bool {
		hb := h.status().Agent
		return hb != nil && hb.HeldBack != nil && hb.HeldBack.Revision == second
	})
	writeFile(t, h.conf, "hand edit\n")
	h.waitFor(20*time.Second, "the hand edit healed, to the revision the host is on", func() bool { return read(h.conf) == "version 1\n" })
	g.let(second)
	h.fetch()
	h.waitFor(30*time.Second, "the second revision good", func() bool {
		st := h.status()
		return st.LastGood != nil && st.LastGood.Revision == second && read(h.conf) == "version 2\n"
	})
	if got := g.heard(); !slices.Equal(got, []string{first + " good", second + " good"}) {
		t.Fatalf("the gate heard %v", got)
	}
}
