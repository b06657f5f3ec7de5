package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

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

func (r *recorder) all() []events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// find is the first event told of reason that match accepts.
func (r *recorder) find(reason events.Reason, match func(events.Event) bool) *events.Event {
	for _, e := range r.all() {
		if e.Reason == reason && (match == nil || match(e)) {
			return &e
		}
	}
	return nil
}

func (r *recorder) wait(t *testing.T, reason events.Reason, match func(events.Event) bool) events.Event {
	t.Helper()
	var e *events.Event
	waitFor(t, 60*time.Second, "event "+string(reason), func() bool {
		e = r.find(reason, match)
		return e != nil
	})
	return *e
}

func (r *recorder) String() string {
	var b strings.Builder
	for _, e := range r.all() {
		fmt.Fprintf(&b, "%s %s %s %s %s: %s\n", e.Severity, e.Reason, e.Resource, e.Revision, e.Condition, e.Message)
	}
	return b.String()
}

func fileManifest(name, content string) *string {
	return gittest.S(fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: %s}\nspec: {path: /etc/%s, content: %q}\n", name, name, content))
}

// TestEventsOfARevisionRefusedThenApplied: a revision that does not
// validate is told refused (an error raising "revision"); the next good
// one is told fetched and applied, clearing it; the local log holds the
// same events as the sink.
func TestEventsOfARevisionRefusedThenApplied(t *testing.T) {
	repo := gittest.NewRepo(t)
	url, _ := repo.Daemon(t)
	root, stateDir := t.TempDir(), t.TempDir()
	rev1 := "main@sha1:" + repo.Commit("one", map[string]*string{"m.yaml": fileManifest("motd", "one\n")})
	rec := &recorder{}
	a := runGitAgent(t, url, agent.Options{Events: rec, Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	rec.wait(t, events.RevisionApplied, func(e events.Event) bool { return e.Revision == rev1 })

	rev2 := "main@sha1:" + repo.Commit("two", map[string]*string{"m.yaml": gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: motd}\nspec: {path: /etc/motd, contents: typo}\n")})
	a.Reconcile(agent.TriggerWebhook)
	refused := rec.wait(t, events.RevisionRefused, nil)
	if refused.Severity != events.Error || refused.Revision != rev2 || refused.Condition != "revision" || !strings.Contains(refused.Message, "contents") {
		t.Errorf("refused: %+v, want an error on %s raising revision, naming the field", refused, rev2)
	}
	if refused.Host == "" || refused.Time.IsZero() {
		t.Errorf("refused: %+v has no host or time", refused)
	}

	rev3 := "main@sha1:" + repo.Commit("three", map[string]*string{"m.yaml": fileManifest("motd", "three\n")})
	a.Reconcile(agent.TriggerWebhook)
	applied := rec.wait(t, events.RevisionApplied, func(e events.Event) bool { return e.Revision == rev3 })
	if applied.Severity != events.Info || applied.Condition != "revision" {
		t.Errorf("applied: %+v, want info clearing revision", applied)
	}
	if rec.find(events.RevisionFetched, func(e events.Event) bool { return e.Revision == rev3 }) == nil {
		t.Errorf("%s not told fetched:\n%s", rev3, rec)
	}

	// The local log says the same, in the same order.
	var logged []events.Event
	waitFor(t, 10*time.Second, "the log written", func() bool {
		var err error
		logged, err = events.Read(state.At(stateDir), time.Time{})
		return err == nil && len(logged) >= len(rec.all())
	})
	told := rec.all()
	for i := range told {
		if logged[i] != told[i] {
			t.Fatalf("event %d: logged %+v, told %+v", i, logged[i], told[i])
		}
	}
	fi, err := os.Stat(filepath.Join(stateDir, events.LogFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the event log: %v, %v; want 0600", fi.Mode(), err)
	}
}

// runGitAgent runs an agent on the main branch of url until the test ends.
func runGitAgent(t *testing.T, url string, opts agent.Options) *agent.Agent {
	t.Helper()
	opts.Source = gitSource(url, opts.Engine.StateDir)
	return runOptions(t, opts)
}

// TestEventsOfDriftAndAFight: a hand edit corrected is told, on the sink
// and on /api/v1/events (listed and followed); an attack that keeps
// undoing a file is told as a fight that started (a warning raising
// fight:ID) and, once left alone past the window, ended (clearing it).
func TestEventsOfDriftAndAFight(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(repo, "m.yaml"), *fileManifest("motd", "desired\n"))
	rec := &recorder{}
	a := runAgent(t, repo, agent.Options{Events: rec, FightThreshold: 3, FightWindow: 3 * time.Second, FightSettle: 200 * time.Millisecond,
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	waitFor(t, 30*time.Second, "ready", func() bool { ok, _ := a.Ready(); return ok })
	srv, err := agent.NewServer(agent.ServerOptions{Addr: "127.0.0.1:0", Events: a.Events})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() { cancel(); <-served }()
	base := "http://" + srv.Addr().String()

	// A follower, connected before the drift.
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/events?follow=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/x-ndjson" {
		t.Fatalf("follow: %d %s", resp.StatusCode, ct)
	}
	followed := make(chan events.Event, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var e events.Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				followed <- e
			}
		}
		close(followed)
	}()

	motd := filepath.Join(root, "etc/motd")
	if err := os.WriteFile(motd, []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	drift := rec.wait(t, events.DriftCorrected, nil)
	if drift.Severity != events.Info || drift.Resource != "File/motd" || !strings.Contains(drift.Message, "File/motd") {
		t.Errorf("drift corrected: %+v", drift)
	}
	select {
	case e := <-followed:
		if e.Reason != events.DriftCorrected || e.Resource != "File/motd" {
			t.Errorf("followed %+v first, want the drift correction", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower was not told of the drift correction")
	}

	// The attack, until the fight is told.
	waitFor(t, 60*time.Second, "a fight told", func() bool {
		os.WriteFile(motd, []byte("attacker\n"), 0o644)
		time.Sleep(50 * time.Millisecond)
		return rec.find(events.FightStarted, nil) != nil
	})
	started := rec.find(events.FightStarted, nil)
	if started.Severity != events.Warning || started.Resource != "File/motd" || started.Condition != "fight:File/motd" {
		t.Errorf("fight started: %+v", started)
	}
	for range 4 { // the fight goes on a while: told once
		os.WriteFile(motd, []byte("attacker\n"), 0o644)
		time.Sleep(400 * time.Millisecond)
	}
	ended := rec.wait(t, events.FightEnded, nil)
	if ended.Severity != events.Info || ended.Condition != started.Condition {
		t.Errorf("fight ended: %+v, want info clearing %s", ended, started.Condition)
	}
	if n := len(slices.DeleteFunc(rec.all(), func(e events.Event) bool { return e.Reason != events.FightStarted })); n != 1 {
		t.Errorf("the fight told started %d times, want once:\n%s", n, rec)
	}

	// Listed, with since.
	list := func(query string) []events.Event {
		t.Helper()
		resp, err := http.Get(base + "/api/v1/events" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []events.Event
		for dec := json.NewDecoder(resp.Body); ; {
			var e events.Event
			if dec.Decode(&e) != nil {
				break
			}
			out = append(out, e)
		}
		return out
	}
	waitFor(t, 10*time.Second, "the fight's end listed", func() bool {
		all := list("")
		return len(all) > 0 && all[len(all)-1].Reason == events.FightEnded
	})
	if got := list("?since=" + ended.Time.Add(time.Nanosecond).Format(time.RFC3339Nano)); len(got) != 0 {
		t.Errorf("since after the last event: %v", got)
	}
	if resp, _ := http.Get(base + "/api/v1/events?since=soon"); resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad since: %v, want 400", resp)
	}
}

// TestEventsOfAProcess: a process that keeps exiting is told restarted by
// its supervisor (a warning); one that fails for good is told failed (an
// error raising resource:ID), and running again once a fix starts it
// (info, clearing it). The supervisors are real.
func TestEventsOfAProcess(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	process := func(command, minUptime string) {
		writeFile(t, filepath.Join(repo, "p.yaml"), fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: job}\nspec:\n  command: [sh, -c, %q]\n  minUptime: %s\n  startLimit: 1\n  stopTimeout: 1s\n", command, minUptime))
	}
	process("sleep 0.3; exit 3", "100ms") // never a quick failure: restarted again and again
	rec := &recorder{}
	t.Cleanup(func() { stopAll(t, repo, root, stateDir) }) // once the agent stopped
	a := runAgent(t, repo, agent.Options{Events: rec, Prune: true,
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	restarted := rec.wait(t, events.ProcessRestarted, func(e events.Event) bool { return e.Severity == events.Warning })
	if restarted.Resource != "Process/job" || !strings.Contains(restarted.Message, "exited with code 3") {
		t.Errorf("restarted: %+v", restarted)
	}

	process("sleep 0.3; exit 3", "1h") // every exit a quick one: failed at the first
	a.Reconcile(agent.TriggerManual)
	failed := rec.wait(t, events.ProcessFailed, nil)
	if failed.Severity != events.Error || failed.Resource != "Process/job" || failed.Condition != "resource:Process/job" || !strings.Contains(failed.Message, "exited with code 3") {
		t.Errorf("failed: %+v", failed)
	}

	process("sleep 1000", "100ms")
	a.Reconcile(agent.TriggerManual)
	running := rec.wait(t, events.ProcessRunning, nil)
	if running.Severity != events.Info || running.Condition != failed.Condition {
		t.Errorf("running again: %+v, want info clearing %s", running, failed.Condition)
	}
}

// TestEventsOfASourceFailingAndRecovered: a fetch refused for a wrong
// password is told failing once (a warning raising "source"), whatever the
// retries, and never with the password; the right one is told recovered
// (clearing it). Real smart HTTP with basic auth.
func TestEventsOfASourceFailingAndRecovered(t *testing.T) {
	repo := gittest.NewRepo(t)
	repo.Commit("one", map[string]*string{"m.yaml": fileManifest("motd", "one\n")})
	srv := repo.HTTP(t, "deploy", "right-horse-battery")
	root, stateDir := t.TempDir(), t.TempDir()
	pass := filepath.Join(t.TempDir(), "password")
	const wrong = "wrong-staple-s3cret"
	writeFile(t, pass, wrong+"\n")
	src := gitSource(srv.URL, stateDir)
	src.Auth = source.Auth{Username: "deploy", PasswordFile: pass}
	rec := &recorder{}
	reg := agent.NewRegistry()
	a := agent.New(agent.Options{Events: rec, Source: src, Metrics: agent.NewMetrics(reg), Interval: time.Hour, DriftInterval: time.Hour, SelfHeal: true,
		Engine: reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	failing := rec.wait(t, events.SourceFailing, nil)
	if failing.Severity != events.Warning || failing.Condition != "source" || !strings.Contains(failing.Message, "fetch failed") {
		t.Errorf("source failing: %+v", failing)
	}
	for n := 2.0; n <= 3; n++ { // fails again: not told again
		a.Reconcile(agent.TriggerManual)
		waitFor(t, 30*time.Second, "another fetch failed", func() bool { return counter(reg, "cortexsync_source_fetch_errors_total") >= n })
	}

	writeFile(t, pass, "right-horse-battery\n") // read again at every fetch
	a.Reconcile(agent.TriggerManual)
	recovered := rec.wait(t, events.SourceRecovered, nil)
	if recovered.Severity != events.Info || recovered.Condition != "source" || !strings.HasPrefix(recovered.Revision, "main@sha1:") {
		t.Errorf("source recovered: %+v", recovered)
	}
	if n := len(slices.DeleteFunc(rec.all(), func(e events.Event) bool { return e.Reason != events.SourceFailing })); n != 1 {
		t.Errorf("told failing %d times, want once:\n%s", n, rec)
	}
	cancel()
	<-done
	done <- nil
	logged, err := os.ReadFile(filepath.Join(stateDir, events.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(logged), wrong) || strings.Contains(rec.String(), wrong) {
		t.Errorf("an event holds the password")
	}
	if !strings.Contains(string(logged), `"reason":"SourceRecovered"`) {
		t.Errorf("the log misses the recovery:\n%s", logged)
	}
}
