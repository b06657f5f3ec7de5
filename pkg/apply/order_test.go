package apply_test

import (
	"context"
	"errors"
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

func noSave(*state.Snapshot) error { return nil }

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
