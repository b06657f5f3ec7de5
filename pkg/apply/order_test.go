package apply_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// recorder is an Applier that leaves the host alone: apply's business here
// is order and bookkeeping. It records every call, fails the IDs in fail,
// and with gate > 0 holds each call until gate calls run at once.
type recorder struct {
	fail map[resource.ID]bool
	gate int

	mu             sync.Mutex
	calls          []string // "delete Directory/site"
	inflight, peak int
}

func (r *recorder) Apply(ctx context.Context, c *diff.Change) (*state.Entry, error) {
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
	if r.fail[c.ID] {
		return nil, errors.New("it would not go")
	}
	if c.Action == diff.Delete {
		return nil, nil
	}
	return &state.Entry{ID: string(c.ID), Kind: c.Kind, Path: c.Path, SpecHash: "h", Created: true}, nil
}

func (r *recorder) Ready(ctx context.Context, rec *state.Entry) (health.Report, bool) {
	return health.Report{}, false
}

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

// pruneAll plans the deletion of every entry, as when all left Git.
func pruneAll(snap *state.Snapshot) *diff.Plan {
	p := &diff.Plan{}
	for _, e := range snap.Inventory {
		p.Changes = append(p.Changes, &diff.Change{ID: resource.ID(e.ID), Kind: e.Kind, Path: e.Path,
			Action: diff.Delete, Reason: diff.RemovedFromGit, Prune: true, Record: e})
	}
	return p
}

func noSave(*state.Snapshot) error { return nil }

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
	snap := &state.Snapshot{}
	ctx := context.Background()
	if _, err := apply.Run(ctx, &recorder{}, set, createAll(set), snap, apply.Options{Save: noSave}); err != nil {
		t.Fatal(err)
	}

	a := &recorder{}
	rep, err := apply.Run(ctx, a, loadSet(t, ""), pruneAll(snap), snap, apply.Options{Prune: true, Save: noSave})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"delete File/deep", "delete File/top", "delete Process/web", "delete Directory/site", "delete Directory/srv"}
	if !slices.Equal(a.calls, want) {
		t.Fatalf("pruned in the order\n  %s\nwant\n  %s", strings.Join(a.calls, "\n  "), strings.Join(want, "\n  "))
	}
	if rep.Failed() || len(snap.Inventory) != 0 {
		t.Fatalf("failed %v, %d entries left", rep.Failed(), len(snap.Inventory))
	}
}

// TestFailedPruneKeepsWhatItDependsOn: a process that could not be stopped
// keeps its entry, and the directory it serves is neither deleted nor
// forgotten; unrelated resources still go. Once the process goes, so does
// the rest, in order.
func TestFailedPruneKeepsWhatItDependsOn(t *testing.T) {
	set := loadSet(t, served)
	snap := &state.Snapshot{}
	ctx := context.Background()
	if _, err := apply.Run(ctx, &recorder{}, set, createAll(set), snap, apply.Options{Save: noSave}); err != nil {
		t.Fatal(err)
	}

	a := &recorder{fail: map[resource.ID]bool{"Process/web": true}}
	rep, err := apply.Run(ctx, a, loadSet(t, ""), pruneAll(snap), snap, apply.Options{Prune: true, Save: noSave})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"delete File/deep", "delete File/top", "delete Process/web"}
	if !slices.Equal(a.calls, want) {
		t.Fatalf("tried\n  %s\nwant\n  %s", strings.Join(a.calls, "\n  "), strings.Join(want, "\n  "))
	}
	outcomes := map[resource.ID]*apply.Result{}
	for _, r := range rep.Results {
		outcomes[r.ID] = r
	}
	for id, w := range map[resource.ID]struct {
		outcome apply.Outcome
		by      resource.ID
	}{
		"Process/web":    {apply.Failed, ""},
		"Directory/site": {apply.Blocked, "Process/web"},
		"Directory/srv":  {apply.Blocked, "Directory/site"},
		"File/deep":      {apply.Applied, ""},
	} {
		if r := outcomes[id]; r == nil || r.Outcome != w.outcome || r.BlockedBy != w.by {
			t.Errorf("%s: %+v, want %s (blocked by %q)", id, r, w.outcome, w.by)
		}
	}
	var b strings.Builder
	rep.Text(&b)
	if !strings.Contains(b.String(), "Directory/site: blocked: kept, because Process/web depends on it and was not deleted\n") {
		t.Errorf("report does not say why Directory/site was kept:\n%s", b.String())
	}
	var left []string
	for _, e := range snap.Inventory {
		left = append(left, e.ID)
	}
	slices.Sort(left)
	if want := []string{"Directory/site", "Directory/srv", "Process/web"}; !slices.Equal(left, want) {
		t.Fatalf("inventory %v, want %v", left, want)
	}
	if e := snap.Find("Process/web"); e.Result == nil || !strings.Contains(e.Result.Error, "it would not go") {
		t.Errorf("Process/web's entry does not record the failure: %+v", e.Result)
	}

	// Next time the process goes; what it kept still knows its order.
	a = &recorder{}
	if _, err := apply.Run(ctx, a, loadSet(t, ""), pruneAll(snap), snap, apply.Options{Prune: true, Save: noSave}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"delete Process/web", "delete Directory/site", "delete Directory/srv"}; !slices.Equal(a.calls, want) {
		t.Fatalf("pruned in the order %v, want %v", a.calls, want)
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
	snap := &state.Snapshot{}
	rep, err := apply.Run(context.Background(), a, set, createAll(set), snap, apply.Options{Concurrency: 3, Save: noSave})
	if err != nil {
		t.Fatal(err)
	}
	if a.peak != 3 || len(a.calls) != 8 || rep.Failed() || len(snap.Inventory) != 8 {
		t.Fatalf("peak %d, %d calls, failed %v, %d entries; want 3, 8, false, 8", a.peak, len(a.calls), rep.Failed(), len(snap.Inventory))
	}
}
