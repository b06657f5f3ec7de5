package main

import (
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
)

// TestStatusSaysUnwatched: status, run by hand, says what the agent's
// report says of directories unwatched for want of inotify watches, and
// nothing while every one is watched.
func TestStatusSaysUnwatched(t *testing.T) {
	r := &reconcile.AgentReport{Since: time.Unix(1700000000, 0).UTC(), Watches: &reconcile.WatchReport{Directories: 40}}
	var b strings.Builder
	agentText(&b, r)
	if strings.Contains(b.String(), "Watches:") {
		t.Errorf("every directory watched, yet:\n%s", b.String())
	}
	r.Watches = &reconcile.WatchReport{Directories: 40, Unwatched: 2, Condition: "out of inotify watches since 2026-12-06T10:00:00Z: 2 of 42 directories unwatched"}
	b.Reset()
	agentText(&b, r)
	if want := "Watches:    out of inotify watches since 2026-12-06T10:00:00Z: 2 of 42 directories unwatched\n"; !strings.Contains(b.String(), want) {
		t.Errorf("status out of watches:\n%s\nwant the line %q", b.String(), want)
	}
}
