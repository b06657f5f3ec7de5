//go:build crash

package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// TestCrashRollback SIGKILLs the agent at seeded moments from the fetch of
// a bad revision (its process never gets ready) to well past its rollback:
// on trial, at the verdict, as the rollback is recorded, while it applies,
// after. A hand edit of a managed file is made while no agent runs. The
// next agent must converge to the last good revision with nothing lost:
// its file bytes and its knowledge base whole (what the bad one added
// gone), its process running and ready, the hand edit in a backup, the
// snapshot and indexes loading, no temp file left, and the history saying
// bad, rolled back, refused. (testdata/script/rollback-kill.txtar is the
// one-kill version in the default suite.)
func TestCrashRollback(t *testing.T) {
	const deadline = 2 * time.Second
	rng := rand.New(rand.NewPCG(*seed, 21))
	repo := gittest.NewRepo(t)
	url, _ := repo.Daemon(t)
	s := newSandbox(t)
	s.src = []string{"--repo", url, "--branch", "main"}
	t.Cleanup(func() { supervise.StopAll(s.State) })
	good := "main@sha1:" + repo.Commit("good", lkgFiles("version good\n", true, "a.md", "b.md"))
	goodKB := map[string]string{"a.md": "# a.md\n", "b.md": "# b.md\n"}
	a := s.startLKG(deadline)
	s.waitLKG(a, "the first revision good", func(st *lkgStatus) bool {
		return st.LastGood != nil && st.LastGood.Revision == good
	})
	a.kill()
	phases := map[string]int{}
	for i := range *kills {
		files := lkgFiles(fmt.Sprintf("bad %d\n", i), false, "a.md", fmt.Sprintf("c%d.md", i))
		files["kb/a.md"], files["kb/b.md"] = gittest.S("# a, rewritten\n"), nil
		for j := range i {
			files[fmt.Sprintf("kb/c%d.md", j)] = nil
		}
		bad := "main@sha1:" + repo.Commit(fmt.Sprintf("bad %d", i), files)
		a := s.startLKG(deadline)
		// Anywhere, or (every other kill) about when the deadline passes
		// and the rollback runs.
		d := time.Duration(rng.Int64N(int64(deadline + 2*time.Second)))
		if i%2 == 1 {
			d = deadline + time.Duration(rng.Int64N(int64(800*time.Millisecond)))
		}
		time.Sleep(d)
		a.kill()
		phases[lkgPhase(t, s, good, bad)]++
		hand := fmt.Sprintf("hand edit %d\n", i)
		if err := os.WriteFile(filepath.Join(s.Root, "etc/app.conf"), []byte(hand), 0o644); err != nil {
			t.Fatal(err)
		}
		a = s.startLKG(deadline)
		s.waitLKG(a, fmt.Sprintf("kill %d (after %s): rolled back to the last good revision", i, d), func(st *lkgStatus) bool {
			conf, _ := os.ReadFile(filepath.Join(s.Root, "etc/app.conf"))
			return st.OnRollback != nil && st.OnRollback.Revision == good && st.OnRollback.Head == bad && st.Revision == good && st.healthy("Process/web") &&
				string(conf) == "version good\n"
		})
		a.kill()
		if b, _ := os.ReadFile(filepath.Join(s.Root, "etc/app.conf")); string(b) != "version good\n" {
			t.Fatalf("kill %d: /etc/app.conf holds %q", i, b)
		}
		if !s.backedUp("/etc/app.conf", hand) {
			t.Fatalf("kill %d: the hand edit %q is in no backup", i, hand)
		}
		kb := map[string]string{}
		entries, _ := os.ReadDir(filepath.Join(s.Root, "srv/kb"))
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(s.Root, "srv/kb", e.Name()))
			kb[e.Name()] = string(b)
		}
		if fmt.Sprint(kb) != fmt.Sprint(goodKB) {
			t.Fatalf("kill %d: the knowledge base holds %v, want %v", i, kb, goodKB)
		}
		snap, err := s.loads()
		if err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		if a := snap.Latest(bad); a == nil || a.Verdict != state.Bad || !a.Refused || a.RolledBackTo != good {
			t.Fatalf("kill %d: the bad revision's history: %+v", i, a)
		}
		if left := append(temps(s.Root), temps(filepath.Join(s.State, "trees"))...); len(left) > 0 {
			t.Fatalf("kill %d: temp files left: %v", i, left)
		}
	}
	t.Logf("%d kills, at: %v", *kills, phases)
}

// lkgFiles is a version of the repository: a config file, a knowledge base
// and a process whose readiness probe passes or not.
func lkgFiles(conf string, ready bool, kb ...string) map[string]*string {
	probe := "true"
	if !ready {
		probe = "false"
	}
	files := map[string]*string{
		"app.conf": gittest.S(conf),
		"all.yaml": gittest.S(`apiVersion: cortex-sync/v1alpha1
kind: File
metadata: {name: conf}
spec: {path: /etc/app.conf, source: app.conf}
---
apiVersion: cortex-sync/v1alpha1
kind: Directory
metadata: {name: kb}
spec: {path: /srv/kb, source: kb}
---
apiVersion: cortex-sync/v1alpha1
kind: Process
metadata: {name: web}
spec:
  command: [sleep, "100021"]
  readinessProbe: {exec: {command: ["` + probe + `"]}, period: 1s}
`),
	}
	for _, n := range kb {
		files["kb/"+n] = gittest.S("# " + n + "\n")
	}
	return files
}

// lkgAgent is a `cortex-sync run` under test.
type lkgAgent struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan error
}

func (s *sandbox) startLKG(deadline time.Duration) *lkgAgent {
	s.t.Helper()
	cmd := s.command("run", "--prune", "--interval", "1h", "--drift-interval", "1h", "--listen", "127.0.0.1:0",
		"--min-ready", "300ms", "--progress-deadline", deadline.String(), "--log-level", "info")
	a := &lkgAgent{cmd: cmd, out: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = a.out, a.out
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { a.done <- cmd.Wait() }()
	return a
}

func (a *lkgAgent) kill() {
	a.cmd.Process.Kill()
	<-a.done
}

// lkgStatus is what the test reads of status -o json.
type lkgStatus struct {
	Revision   string       `json:"revision"`
	LastGood   *state.Known `json:"lastGood"`
	OnRollback *state.Pin   `json:"onRollback"`
	Resources  []struct {
		ID     string `json:"id"`
		Health string `json:"health"`
	} `json:"resources"`
}

func (st *lkgStatus) healthy(id string) bool {
	for _, r := range st.Resources {
		if r.ID == id {
			return r.Health == "Healthy"
		}
	}
	return false
}

// waitLKG waits up to two minutes for the status to say so; the agent
// must not exit meanwhile.
func (s *sandbox) waitLKG(a *lkgAgent, what string, ok func(*lkgStatus) bool) {
	s.t.Helper()
	for limit := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		_, out := s.run("status", "-o", "json")
		var st lkgStatus
		if json.Unmarshal([]byte(out), &st) == nil && ok(&st) {
			return
		}
		select {
		case err := <-a.done:
			s.t.Fatalf("%s: the agent exited (%v):\n%s", what, err, tail(a.out.String(), 30))
		default:
		}
		if time.Now().After(limit) {
			a.kill()
			s.t.Fatalf("%s: not so after 2m; status:\n%s\nagent:\n%s", what, tail(out, 40), tail(a.out.String(), 40))
		}
	}
}

// lkgPhase says where a kill landed, from the snapshot it left.
func lkgPhase(t *testing.T, s *sandbox, good, bad string) string {
	snap, err := s.loads()
	if err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	a := snap.Latest(bad)
	switch {
	case a == nil:
		return "before the bad revision"
	case a.Verdict == state.Pending:
		return "on trial"
	case snap.Pin == nil || snap.Pin.Head != bad:
		return "judged, not rolled back"
	case snap.Revision != good:
		return "rolling back"
	}
	return "rolled back"
}
