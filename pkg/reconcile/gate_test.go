package reconcile

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// gateManifests: a directory with a file inside it, a file that depends on
// another, and an unrelated file.
const gateManifests = `apiVersion: cortex-sync/v1alpha1
kind: Directory
metadata: {name: kb}
spec: {path: /srv/kb}
---
apiVersion: cortex-sync/v1alpha1
kind: File
metadata: {name: base}
spec: {path: /etc/base, content: x}
---
apiVersion: cortex-sync/v1alpha1
kind: File
metadata: {name: app}
spec: {path: /etc/app, content: x, dependsOn: [File/base]}
`

var gateRef = state.Source{Type: "dir", URL: "/repo", Path: "."}

// gateSession is an engine over a real (empty) root and state dir, with
// manifests as its desired state (nil: none) and snap as its snapshot.
func gateSession(t *testing.T, manifests *string, snap *state.Snapshot, p Policy) (*Session, *Desired) {
	t.Helper()
	s, err := Open(context.Background(), Config{Root: t.TempDir(), StateDir: t.TempDir(), Concurrency: 1}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	snap.Root = s.w.snap.Root
	s.w.snap = snap
	s.Policy = p
	set := resource.Recalled(nil)
	if manifests != nil {
		if set, err = resource.Load(fstest.MapFS{"m.yaml": {Data: []byte(*manifests)}}, ".", driver.Kinds()); err != nil {
			t.Fatal(err)
		}
	}
	d := &Desired{Ref: gateRef, Checkout: &source.Checkout{Tree: emptyTree{}}, Set: set}
	s.desired = d
	return s, d
}

type emptyTree struct{ fstest.MapFS }

func (emptyTree) Walk(string, func(source.Entry) error) error { return nil }
func (emptyTree) ContentID(string) (string, error)            { return "", errors.New("none") }
func (emptyTree) Close() error                                { return nil }

func entry(id, path string, deps ...string) *state.Entry {
	return &state.Entry{ID: id, Kind: resource.ID(id).Kind(), Path: path, DependsOn: deps, Created: true}
}

func TestGate(t *testing.T) {
	m := gateManifests
	none := ""
	failed := func(id string) *state.Entry {
		e := entry(id, "/etc/"+resource.ID(id).Name())
		e.Result = &state.Result{Action: "update", Error: "it broke", Time: time.Now()}
		return e
	}
	update := func(id string) *diff.Change {
		return &diff.Change{ID: resource.ID(id), Action: diff.Update, Reason: diff.ChangedInGit, Desired: &resource.Resource{}}
	}
	prune := func(id, path string, rec *state.Entry) *diff.Change {
		return &diff.Change{ID: resource.ID(id), Path: path, Action: diff.Delete, Reason: diff.RemovedFromGit, Prune: true, Record: rec}
	}
	tests := []struct {
		name      string
		manifests *string
		snap      *state.Snapshot
		policy    Policy
		suspended bool
		hold      Hold
		change    *diff.Change
		verdict   diff.Verdict // "" lets it go
		reason    error
	}{
		{name: "a change with nothing in its way", manifests: &m, snap: &state.Snapshot{Source: gateRef}, change: update("File/base")},
		{name: "annotated reconcile: disabled", manifests: &m, snap: &state.Snapshot{},
			change: &diff.Change{ID: "File/base", Action: diff.Update, Suspended: true}, verdict: diff.Refused, reason: ErrDisabled},
		{name: "the agent suspended", manifests: &m, snap: &state.Snapshot{}, suspended: true,
			change: update("File/base"), verdict: diff.Refused, reason: ErrSuspended},
		{name: "drift with selfHeal off", manifests: &m, snap: &state.Snapshot{}, policy: Policy{NoSelfHeal: true},
			change: &diff.Change{ID: "File/base", Action: diff.Update, Reason: diff.Drifted}, verdict: diff.Refused, reason: ErrSelfHealOff},
		{name: "a change in Git with selfHeal off", manifests: &m, snap: &state.Snapshot{}, policy: Policy{NoSelfHeal: true},
			change: update("File/base")},
		{name: "prune without --prune", manifests: &m, snap: &state.Snapshot{Source: gateRef, Inventory: []*state.Entry{entry("File/old", "/etc/old")}},
			change: prune("File/old", "/etc/old", nil), verdict: diff.Refused, reason: ErrPruneOff},
		{name: "prune of everything", manifests: &none, policy: Policy{Prune: true},
			snap:   &state.Snapshot{Source: gateRef, Inventory: []*state.Entry{entry("File/old", "/etc/old")}},
			change: prune("File/old", "/etc/old", nil), verdict: diff.Refused, reason: ErrEmptyPrune},
		{name: "prune of everything, allowed", manifests: &none, policy: Policy{Prune: true, AllowEmpty: true},
			snap:   &state.Snapshot{Source: gateRef, Inventory: []*state.Entry{entry("File/old", "/etc/old")}},
			change: prune("File/old", "/etc/old", nil)},
		{name: "prune after a source change", manifests: &m, policy: Policy{Prune: true},
			snap:   &state.Snapshot{Source: state.Source{Type: "git", URL: "git://elsewhere"}, Inventory: []*state.Entry{entry("File/old", "/etc/old")}},
			change: prune("File/old", "/etc/old", nil), verdict: diff.Refused, reason: ErrSourceChange},
		// sync refused this and the agent pruned; the stricter rule wins.
		{name: "prune with an inventory and no recorded source", manifests: &m, policy: Policy{Prune: true},
			snap:   &state.Snapshot{Inventory: []*state.Entry{entry("File/old", "/etc/old")}},
			change: prune("File/old", "/etc/old", nil), verdict: diff.Refused, reason: ErrSourceChange},
		{name: "prune after a source change, allowed", manifests: &m, policy: Policy{Prune: true, AllowSourceChange: true},
			snap:   &state.Snapshot{Inventory: []*state.Entry{entry("File/old", "/etc/old")}},
			change: prune("File/old", "/etc/old", nil)},
		{name: "a dependency whose last apply failed", manifests: &m, snap: &state.Snapshot{Inventory: []*state.Entry{failed("File/base")}},
			change: update("File/app"), verdict: diff.Blocked, reason: ErrDependencyFailed},
		{name: "a dependency that failed before it was ever applied", manifests: &m,
			snap:   &state.Snapshot{LastAttempt: &state.Attempt{Failed: []state.Failure{{ID: "File/base", Error: "it broke"}}}},
			change: update("File/app"), verdict: diff.Blocked, reason: ErrDependencyFailed},
		{name: "a dependency not applied yet", manifests: &m, snap: &state.Snapshot{},
			change: update("File/app"), verdict: diff.Waiting, reason: ErrDependencyPending},
		{name: "a dependency applied", manifests: &m, snap: &state.Snapshot{Inventory: []*state.Entry{entry("File/base", "/etc/base")}},
			change: update("File/app")},
		{name: "a prune whose dependent goes first", manifests: &none, policy: Policy{Prune: true, AllowEmpty: true},
			snap:   &state.Snapshot{Source: gateRef, Inventory: []*state.Entry{entry("Directory/kb", "/srv/kb"), entry("Process/web", "", "Directory/kb")}},
			change: prune("Directory/kb", "/srv/kb", nil), verdict: diff.Waiting, reason: ErrDependentFirst},
		// The agent pruned the directory first on snapshots written before
		// dependencies were recorded; a path inside it goes first.
		{name: "a prune of a directory with a file inside it, no dependencies recorded", manifests: &none, policy: Policy{Prune: true, AllowEmpty: true},
			snap:   &state.Snapshot{Source: gateRef, Inventory: []*state.Entry{entry("Directory/kb", "/srv/kb"), entry("File/note", "/srv/kb/note")}},
			change: prune("Directory/kb", "/srv/kb", nil), verdict: diff.Waiting, reason: ErrDependentFirst},
		{name: "a prune of the file inside first", manifests: &none, policy: Policy{Prune: true, AllowEmpty: true},
			snap:   &state.Snapshot{Source: gateRef, Inventory: []*state.Entry{entry("Directory/kb", "/srv/kb"), entry("File/note", "/srv/kb/note")}},
			change: prune("File/note", "/srv/kb/note", nil)},
		{name: "held by a hold from outside (a fight)", manifests: &m, snap: &state.Snapshot{},
			hold: func(*diff.Change, time.Time) (time.Time, error) {
				return time.Now().Add(time.Minute), errors.New("fighting")
			},
			change: update("File/base"), verdict: diff.Waiting},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, d := gateSession(t, tt.manifests, tt.snap, tt.policy)
			s.Suspend(tt.suspended)
			if tt.hold != nil {
				s.AddHold(tt.hold)
			}
			o := s.gate(context.Background(), d, tt.change, tt.snap, time.Now())
			switch {
			case tt.verdict == "" && o != nil:
				t.Fatalf("held: %s: %v", o.Verdict, o.Err)
			case tt.verdict == "":
			case o == nil:
				t.Fatalf("let go, want %s (%v)", tt.verdict, tt.reason)
			case o.Verdict != tt.verdict || (tt.reason != nil && !errors.Is(o.Err, tt.reason)):
				t.Fatalf("%s: %v; want %s: %v", o.Verdict, o.Err, tt.verdict, tt.reason)
			case o.Verdict == diff.Waiting && o.Until.IsZero() && tt.hold != nil:
				t.Fatalf("waiting with no time to look again")
			}
		})
	}
}
