package reconcile_test

import (
	"context"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// TestStatusWithNoAttempt: a snapshot that records resources and no
// attempt (an agent that has only found things as desired, or a snapshot
// from before attempts were kept) has a status: Synced, not a panic.
func TestStatusWithNoAttempt(t *testing.T) {
	h := newHost(t)
	h.file("a", "/etc/a", "a")
	h.run(false, reconcile.Policy{})
	dir := state.At(h.stdir)
	snap, err := dir.Load()
	if err != nil {
		t.Fatal(err)
	}
	snap.LastAttempt = nil
	if err := dir.Save(snap); err != nil {
		t.Fatal(err)
	}
	st := h.engine().Status(context.Background())
	if st.Sync != health.Synced || len(st.Resources) != 1 {
		t.Fatalf("status %s with %d resources, want Synced with 1", st.Sync, len(st.Resources))
	}
}
