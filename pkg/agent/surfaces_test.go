package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// surfaces are what each surface says of the revision the host converges
// to: its name and verdict ("" when not judged).
type surfaces struct {
	api, cli, history, metric string
}

// read reads every surface at once: the agent's /api/v1/status document,
// status run by hand (the snapshot on disk and the agent's report, from a
// session of its own), history (the snapshot's newest line) and the
// cortexsync_revision_verdict gauge.
func (h *lkgHost) surfaces() surfaces {
	h.t.Helper()
	var out surfaces
	say := func(v *state.Applied) string {
		if v == nil {
			return "none"
		}
		return v.Revision + " " + string(cmpOr(v.Verdict, "none"))
	}
	out.api = say(h.status().Verdict)
	ctx := context.Background()
	s, err := reconcile.Open(ctx, reconcile.Config{Root: h.root, StateDir: h.stateDir, Concurrency: 1, LockTimeout: 10 * time.Second}, nil, false)
	if err != nil {
		h.t.Fatal(err)
	}
	out.cli = say(s.Status(ctx).Verdict)
	s.Close()
	snap := h.snapshot()
	if tr := snap.Trial(); tr != nil {
		out.history = say(tr)
	} else if n := len(snap.History); n > 0 {
		last := snap.History[n-1]
		if last.RollbackFrom != "" {
			last = *snap.Latest(last.Revision) // the revision rolled back to, as judged
		}
		out.history = say(&last)
	}
	for _, v := range []state.Verdict{state.Pending, state.Good, state.Bad} {
		if counterWith(h.reg, "cortexsync_revision_verdict", string(v)) == 1 {
			out.metric = string(v)
		}
	}
	return out
}

func cmpOr(v, def state.Verdict) state.Verdict {
	if v == "" {
		return def
	}
	return v
}

// agree waits until every surface says rev is v, and fails naming the one
// that does not.
func (h *lkgHost) agree(what, rev string, v state.Verdict) {
	h.t.Helper()
	want := rev + " " + string(v)
	var got surfaces
	deadline := time.Now().Add(time.Minute)
	for got = h.surfaces(); got.api != want || got.cli != want || got.history != want || got.metric != string(v); got = h.surfaces() {
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: want every surface to say %s; got %+v\nlog:\n%s", what, want, got, h.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSurfacesAgreeOnTheRevisionOnTrial drives revisions in by webhook,
// by poll and by reconcile, and reads every surface at each phase: on
// trial, good, bad and rolled back. Before, status showed the previous
// revision's verdict ("good") while a new one was on trial.
func TestSurfacesAgreeOnTheRevisionOnTrial(t *testing.T) {
	h := newLKGHost(t)
	h.minReady, h.deadline = 300*time.Millisecond, time.Minute
	ready := filepath.Join(t.TempDir(), "ready")
	files := map[string]*string{}
	commit := func(v, probe string) string {
		files["conf.yaml"] = gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: conf}\nspec: {path: /etc/app.conf, content: \"" + v + "\\n\"}\n")
		files["web.yaml"] = gittest.S(fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: web}\nspec:\n  command: [sleep, \"100%s\"]\n  readinessProbe: {exec: {command: [%s]}, period: 200ms}\n", v, probe))
		return h.commit(v, files)
	}
	first := commit("1", "true")
	h.startGood(first)
	h.agree("the first revision", first, state.Good)

	// By webhook: on trial until its probe passes, then good.
	second := commit("2", `test, -e, "`+ready+`"`)
	h.fetch()
	h.agree("by webhook, on trial", second, state.Pending)
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h.agree("by webhook, judged", second, state.Good)

	// By poll: on trial while its process runs, then bad once it fails
	// for good (minUptime 1h: every exit is a quick one; startLimit 1),
	// and rolled back: every surface shows the revision the host is back
	// on, good.
	stop := filepath.Join(t.TempDir(), "stop")
	files["web.yaml"] = gittest.S(fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: web}\nspec:\n  command: [sh, -c, 'while [ ! -e %s ]; do sleep 0.1; done; exit 3']\n  minUptime: 1h\n  startLimit: 1\n  readinessProbe: {exec: {command: [\"false\"]}, period: 200ms}\n", stop))
	third := h.commit("3", files)
	h.a.Reconcile(agent.TriggerInterval)
	h.agree("by poll, on trial", third, state.Pending)
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h.waitFor(time.Minute, "the third revision judged bad and rolled back", func() bool {
		st := h.status()
		return st.OnRollback != nil && st.OnRollback.Revision == second
	})
	h.agree("rolled back", second, state.Good)

	// By reconcile (by hand): a fixing commit ends the hold, on trial,
	// then good.
	ready4 := ready + "4"
	fourth := commit("4", `test, -e, "`+ready4+`"`)
	h.a.Reconcile(agent.TriggerManual)
	h.agree("by reconcile, on trial", fourth, state.Pending)
	if err := os.WriteFile(ready4, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h.agree("by reconcile, judged", fourth, state.Good)
}
