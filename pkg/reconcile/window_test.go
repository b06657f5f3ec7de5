package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

func TestWindowGate(t *testing.T) {
	now := time.Date(2026, 12, 7, 21, 30, 0, 0, time.UTC)
	ws := reconcile.Windows{Windows: resource.Windows{{Schedule: "0 22 * * *", Duration: resource.Duration(time.Hour)}}, Which: "spec.hosts[0].windows"}
	overridden := map[string]bool{}
	g := reconcile.WindowGate{
		For: func(rev string) reconcile.Windows {
			if rev == "free" {
				return reconcile.Windows{}
			}
			return ws
		},
		Overridden: func(_ context.Context, rev string) bool { return overridden[rev] },
		Override:   "cortex-sync fleet rollout override-window",
		Now:        func() time.Time { return now },
	}
	ctx := context.Background()
	if err := g.Admit(ctx, "free"); err != nil {
		t.Fatalf("a revision without windows: %v", err)
	}
	err := g.Admit(ctx, "r2")
	var we *reconcile.WindowError
	if !errors.As(err, &we) || !errors.Is(err, reconcile.ErrOutsideWindow) || !we.Opens.Equal(now.Add(30*time.Minute)) {
		t.Fatalf("outside the window: %v", err)
	}
	if want := "outside the host's deploy windows: r2 waits for the window that opens at 2026-12-07T22:00:00Z (fleet.yaml spec.hosts[0].windows); the host stays on the revision it is on, healing it; cortex-sync fleet rollout override-window r2 lets it in now"; err.Error() != want {
		t.Fatalf("got  %s\nwant %s", err, want)
	}
	overridden["r2"] = true
	if err := g.Admit(ctx, "r2"); err != nil {
		t.Fatalf("overridden: %v", err)
	}
	if err := g.Admit(ctx, "r3"); err == nil || !strings.Contains(err.Error(), "r3 waits") {
		t.Fatalf("an override is per revision: %v", err)
	}
	now = now.Add(31 * time.Minute)
	if err := g.Admit(ctx, "r3"); err != nil {
		t.Fatalf("inside the window: %v", err)
	}
}
