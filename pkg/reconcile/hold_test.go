package reconcile

import (
	"errors"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// TestPruneHoldIsAnError: the prune hold the agent reports (status,
// /readyz, its log) is the Gate's error value, whatever holds it, so
// errors.Is tells one hold from another; it is text only where it is
// rendered (the agent report, a log line).
func TestPruneHoldIsAnError(t *testing.T) {
	m, none := gateManifests, ""
	old := []*state.Entry{entry("File/old", "/etc/old")}
	tests := []struct {
		name      string
		manifests *string
		snap      *state.Snapshot
		policy    Policy
		want      error // nil: no hold
	}{
		{name: "nothing leaves", manifests: &m, policy: Policy{Prune: true},
			snap: &state.Snapshot{Source: gateRef, Inventory: []*state.Entry{entry("File/base", "/etc/base")}}},
		{name: "prune off", manifests: &none, snap: &state.Snapshot{Source: gateRef, Inventory: old}},
		{name: "an empty desired set", manifests: &none, policy: Policy{Prune: true},
			snap: &state.Snapshot{Source: gateRef, Inventory: old}, want: ErrEmptyPrune},
		{name: "an empty desired set, allowed", manifests: &none, policy: Policy{Prune: true, AllowEmpty: true},
			snap: &state.Snapshot{Source: gateRef, Inventory: old}},
		{name: "a source change", manifests: &m, policy: Policy{Prune: true},
			snap: &state.Snapshot{Source: state.Source{Type: "git", URL: "git://elsewhere"}, Inventory: old}, want: ErrSourceChange},
		{name: "no recorded source", manifests: &m, policy: Policy{Prune: true},
			snap: &state.Snapshot{Inventory: old}, want: ErrSourceChange},
		{name: "a source change, allowed", manifests: &m, policy: Policy{Prune: true, AllowSourceChange: true},
			snap: &state.Snapshot{Inventory: old}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := gateSession(t, tt.manifests, tt.snap, tt.policy)
			err := s.PruneHold()
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("held: %v", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("hold %v (%T), want an error that is %v", err, err, tt.want)
			}
		})
	}
}
