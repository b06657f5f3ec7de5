package diff_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// observer plans every resource as a create (a delete once it left Git),
// fails File/bad, and holds each call until gate calls run at once.
type observer struct {
	gate           int
	mu             sync.Mutex
	inflight, peak int
}

func (o *observer) Verbs(string) diff.Verbs { return diff.DefaultVerbs }

func (o *observer) Observe(ctx context.Context, desired *resource.Resource, rec *state.Entry) (*diff.Change, error) {
	o.mu.Lock()
	o.inflight++
	o.peak = max(o.peak, o.inflight)
	o.mu.Unlock()
	defer func() { o.mu.Lock(); o.inflight--; o.mu.Unlock() }()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		o.mu.Lock()
		open := o.peak >= o.gate
		o.mu.Unlock()
		if open {
			break
		}
	}
	switch {
	case desired == nil:
		return &diff.Change{Observed: diff.Observation{Recorded: true, Exists: true}}, nil
	case desired.ID() == "File/bad":
		return nil, errors.New("cannot look")
	}
	return &diff.Change{Observed: diff.Observation{Desired: true}}, nil
}

// TestMakeIsBoundedAndOrdered: resources are observed in parallel, never
// more than concurrency at once; the plan lists the desired in dependency
// order, then what left Git, and an observation error stays with its
// resource.
func TestMakeIsBoundedAndOrdered(t *testing.T) {
	var m strings.Builder
	for _, n := range []string{"f", "e", "d", "c", "bad", "a"} {
		m.WriteString("---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: " + n + "}\nspec: {path: /" + n + ", content: x}\n")
	}
	set, err := resource.Load(fstest.MapFS{"m.yaml": {Data: []byte(m.String())}}, ".", driver.Kinds())
	if err != nil {
		t.Fatal(err)
	}
	snap := &state.Snapshot{Inventory: []*state.Entry{{ID: "File/gone", Kind: "File", Created: true}, {ID: "File/a", Kind: "File", Created: true}, {ID: "File/old", Kind: "File", Created: true}}}
	o := &observer{gate: 3}
	p := diff.Make(context.Background(), o, set, snap, 3)
	var got []string
	for _, c := range p.Changes {
		msg := ""
		if c.Err != nil {
			msg = c.Err.Error()
		}
		got = append(got, string(c.ID)+" "+string(c.Action)+" "+msg)
	}
	want := "File/a create |File/bad no-op cannot look|File/c create |File/d create |File/e create |File/f create |File/gone delete |File/old delete "
	if strings.Join(got, "|") != want || o.peak != 3 {
		t.Fatalf("peak %d, plan\n  %s\nwant peak 3, plan\n  %s", o.peak, strings.Join(got, "\n  "), strings.ReplaceAll(want, "|", "\n  "))
	}
}
