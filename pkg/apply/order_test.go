package apply_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// recorder is a Converger that leaves the host alone: apply's business
// here is order and concurrency (what may go when is the engine's, tested
// with it). It records every call, and with gate > 0 holds each call until
// gate calls run at once.
type recorder struct {
	gate int

	mu             sync.Mutex
	calls          []string // "delete Directory/site"
	inflight, peak int
}

func (r *recorder) ApplyPlanned(ctx context.Context, c *diff.Change) diff.Outcome {
	r.mu.Lock()
	r.calls = append(r.calls, string(c.Action)+" "+string(c.ID))
	r.inflight++
	r.peak = max(r.peak, r.inflight)
	r.mu.Unlock()
	defer func() { r.mu.Lock(); r.inflight--; r.mu.Unlock() }()
	for deadline := time.Now().Add(5 * time.Second); r.gate > 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		r.mu.Lock()
		open := r.peak >= r.gate
		r.mu.Unlock()
		if open {
			break
		}
	}
	return diff.Outcome{Verdict: diff.Applied, Change: c}
}

func (r *recorder) Save() error { return nil }

func loadSet(t *testing.T, manifests string) *resource.Set {
	t.Helper()
	set, err := resource.Load(fstest.MapFS{"m.yaml": {Data: []byte(manifests)}}, ".", driver.Kinds())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// createAll plans every resource of set as a create.
func createAll(set *resource.Set) *diff.Plan {
	p := &diff.Plan{}
	for _, r := range set.Resources() {
		c := &diff.Change{ID: r.ID(), Kind: r.Kind, Action: diff.Create, Reason: diff.AddedInGit, Desired: r}
		if claims := r.Spec.Claims(); len(claims) > 0 {
			c.Path = claims[0].Path
		}
		p.Changes = append(p.Changes, c)
	}
	return p
}

// pruneAll plans the deletion of every resource of set, as when all left
// Git, with the records an apply of set leaves (their dependencies).
func pruneAll(set *resource.Set) *diff.Plan {
	p := &diff.Plan{}
	for _, c := range createAll(set).Changes {
		rec := &state.Entry{ID: string(c.ID), Kind: c.Kind, Path: c.Path}
		for _, d := range set.Deps(c.ID) {
			rec.DependsOn = append(rec.DependsOn, string(d))
		}
		p.Changes = append(p.Changes, &diff.Change{ID: c.ID, Kind: c.Kind, Path: c.Path,
			Action: diff.Delete, Reason: diff.RemovedFromGit, Prune: true, Record: rec})
	}
	return p
}

// served is a directory, a process serving it, a parent directory, and two
// unrelated files at different depths.
const served = `apiVersion: cortex-sync/v1alpha1
kind: Directory
metadata: {name: srv}
spec: {path: /srv}
---
apiVersion: cortex-sync/v1alpha1
kind: Directory
metadata: {name: site}
spec: {path: /srv/site}
---
apiVersion: cortex-sync/v1alpha1
kind: Process
metadata: {name: web}
spec:
  dependsOn: [Directory/site]
  command: [python3, -m, http.server]
---
apiVersion: cortex-sync/v1alpha1
kind: File
metadata: {name: deep}
spec: {path: /a/b/c/d, content: x}
---
apiVersion: cortex-sync/v1alpha1
kind: File
metadata: {name: top}
spec: {path: /top, content: x}
`

// TestPruneInReverseDependencyOrder: what left Git goes dependents first
// (the process before the directory it serves, the directory before its
// parent), deeper paths first among the rest.
func TestPruneInReverseDependencyOrder(t *testing.T) {
	set := loadSet(t, served)
	a := &recorder{}
	rep, err := apply.Run(context.Background(), a, loadSet(t, ""), pruneAll(set), apply.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"delete File/deep", "delete File/top", "delete Process/web", "delete Directory/site", "delete Directory/srv"}
	if !slices.Equal(a.calls, want) {
		t.Fatalf("pruned in the order\n  %s\nwant\n  %s", strings.Join(a.calls, "\n  "), strings.Join(want, "\n  "))
	}
	if rep.Failed() {
		t.Fatalf("failed: %+v", rep.Results)
	}
}

// TestLevelsInDependencyOrder: each group goes once the one before it is
// done: a directory before the process serving it.
func TestLevelsInDependencyOrder(t *testing.T) {
	set := loadSet(t, served)
	a := &recorder{}
	if _, err := apply.Run(context.Background(), a, set, createAll(set), apply.Options{Concurrency: 4}); err != nil {
		t.Fatal(err)
	}
	at := map[string]int{}
	for i, c := range a.calls {
		at[c] = i
	}
	if at["create Directory/site"] > at["create Process/web"] || at["create Directory/srv"] > at["create Directory/site"] {
		t.Fatalf("applied in the order %v", a.calls)
	}
}

// TestConcurrencyIsBounded: independent resources apply in parallel, never
// more than Concurrency at once.
func TestConcurrencyIsBounded(t *testing.T) {
	var m strings.Builder
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		m.WriteString("---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: " + n + "}\nspec: {path: /" + n + ", content: x}\n")
	}
	set := loadSet(t, m.String())
	a := &recorder{gate: 3}
	rep, err := apply.Run(context.Background(), a, set, createAll(set), apply.Options{Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	if a.peak != 3 || len(a.calls) != 8 || rep.Failed() {
		t.Fatalf("peak %d, %d calls, failed %v; want 3, 8, false", a.peak, len(a.calls), rep.Failed())
	}
}
