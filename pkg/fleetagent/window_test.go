package fleetagent

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
)

// TestWindowPassedBy: a host outside its deploy window (its rule's
// windows:) asks the rollout for nothing while the others roll, one at a
// time (maxUnavailable 1): it holds no slot and blocks no one. fleet
// status shows it waiting for its window and when that opens; an
// override of the revision lets it in at once.
func TestWindowPassedBy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, etcdtest.Shared(t).Endpoints(), "{maxUnavailable: 1, minReady: 500ms, progressDeadline: 30s}")
	// A window a minute wide that opens in half an hour (UTC), whatever
	// the hour the test runs at.
	opens := time.Now().UTC().Add(30 * time.Minute).Truncate(time.Minute)
	f.rules = fmt.Sprintf("    - match: {name: night}\n      paths: [base]\n      windows: [{schedule: \"%d %d * * *\", duration: 1m}]\n", opens.Minute(), opens.Hour())
	v1 := f.version("v1", true, false)
	names := []string{"h1", "h2", "night"}
	hosts := map[string]*host{}
	for _, n := range names {
		hosts[n] = f.start(n)
	}
	for _, n := range names {
		hosts[n].good(v1, 2*time.Minute) // a host on no revision takes its first at once
	}
	night := hosts["night"]
	asked := night.gate.asked()

	v2 := f.version("v2", true, false)
	for _, n := range names {
		hosts[n].fetch()
	}
	night.waitFor(30*time.Second, "waiting for its window", func() bool {
		hb := night.status().Agent.HeldBack
		return hb != nil && hb.Revision == v2 && hb.WindowOpens.Equal(opens)
	})
	hosts["h1"].good(v2, time.Minute)
	hosts["h2"].good(v2, time.Minute)
	oneAtATime(t, f, "v2", "h1", "h2")
	if st := night.status(); st.Revision != v1 {
		t.Errorf("night is on %s; want v1 until its window", st.Revision)
	}
	if n := night.gate.asked(); n != asked {
		t.Errorf("night's gates after the window were asked %d times for v2; want none: outside its window it asks the rollout for nothing", n-asked)
	}
	night.waitFor(10*time.Second, "fleet status showing its window", func() bool {
		for _, row := range f.read().Hosts {
			if row.Host == "night" {
				return row.Phase == fleet.PhaseWindow && row.WindowOpens.Equal(opens)
			}
		}
		return false
	})
	for _, ro := range f.read().Rollouts {
		if slices.Contains(ro.Applying, "night") {
			t.Errorf("rollout of %s: night holds a slot outside its window", ro.Revision)
		}
	}

	// The override lets v2 in now, under the rollout's slot.
	if err := f.client().OverrideWindow(context.Background(), v2, "test", "urgent"); err != nil {
		t.Fatal(err)
	}
	night.fetch()
	night.good(v2, time.Minute)
	if night.status().Agent.HeldBack != nil {
		t.Errorf("night still says it holds back a revision: %+v", night.status().Agent.HeldBack)
	}
	oneAtATime(t, f, "v2", names...)
	waitConverged(t, f, v2)
}
