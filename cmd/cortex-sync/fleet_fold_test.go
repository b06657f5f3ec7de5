package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// TestFleetRolloutFolded: after KeepRollouts+2 rollouts the two oldest
// are folded; fleet rollout status of one shows its summary, the verbs
// on it say it was folded, and fleet rollout status counts them.
func TestFleetRolloutFolded(t *testing.T) {
	cl := etcdtest.New(t)
	etcd := []string{"--etcd-endpoints", strings.Join(cl.Endpoints(), ","), "--fleet", "prod"}
	cli := func(args ...string) []string { return append(args, etcd...) }
	h1 := joinHost(t, cl.Endpoints(), "h1")
	ctx := context.Background()
	rev := func(i int) string { return fmt.Sprintf("main@sha1:%040d", i) }
	for i := 1; i <= fleet.KeepRollouts+2; i++ {
		r := fleet.Revision{ID: rev(i), Rollout: resource.Rollout{}}
		if d, err := h1.Admit(ctx, r); err != nil || !d.Go {
			t.Fatalf("admit %d: %+v %v", i, d, err)
		}
		if i == 2 {
			if err := h1.Bad(ctx, r.ID, "Process/web: readiness failed"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := h1.Good(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}
	var out string
	for end := time.Now().Add(10 * time.Second); !strings.Contains(out, "folded"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the rollout of %s not folded:\n%s", rev(2), out)
		}
		_, out, _ = runCLI(t, cli("fleet", "rollout", "status", "--revision", rev(2))...)
	}
	for _, re := range []string{
		`(?m)^Rollout of main@sha1:0{12}: folded \(failed\) \(1 bad hosts reached the failure threshold \(1\)\)$`,
		`(?m)^  started \S+ by h1; maxUnavailable 1, canary 0, minReady 10s$`,
		`(?m)^  completed \S+; good: 0; bad: 1 \(h1 \(Process/web: readiness failed\)\)$`,
		`(?m)^  folded by h1 at \S+: its per-host records are deleted$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("rollout status of a folded rollout does not match %s:\n%s", re, out)
		}
	}
	code, out, errs := runCLI(t, cli("fleet", "rollout", "status", "--revision", rev(1), "-o", "json")...)
	var doc struct {
		Rollouts []fleet.RolloutStatus `json:"rollouts"`
		Folded   []fleet.Summary       `json:"folded"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 || len(doc.Rollouts) != 0 || len(doc.Folded) != 1 || doc.Folded[0].State != fleet.SummaryComplete || doc.Folded[0].Good != 1 {
		t.Fatalf("rollout status -o json of a folded rollout: exit %d %v\n%s%s", code, err, out, errs)
	}
	code, out, _ = runCLI(t, cli("fleet", "rollout", "status")...)
	if code != 0 || strings.Count(out, "Rollout of ") != fleet.KeepRollouts || !strings.Contains(out, "Folded:     2 older rollouts, into summaries (the newest: main@sha1:000000000000, main@sha1:000000000000)") {
		t.Fatalf("rollout status: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{
		{"fleet", "rollout", "resume", "--revision", rev(2)},
		{"fleet", "rollout", "abort", "--revision", rev(2)},
		{"fleet", "rollout", "override-window", rev(2)},
	} {
		code, out, errs := runCLI(t, cli(args...)...)
		if code != 1 || out != "" || !strings.Contains(errs, "the rollout of "+rev(2)+" in fleet prod is over and folded into a summary by h1") ||
			!strings.Contains(errs, "failed (1 bad hosts reached the failure threshold (1)); good 0, bad 1: h1 (Process/web: readiness failed)") {
			t.Errorf("%v on a folded rollout: exit %d\n%s%s", args, code, out, errs)
		}
	}
	h1.SetStatus(fleet.HostStatus{Revision: rev(5), Head: rev(5), HeadTime: time.Now(), Sync: "Synced", Health: "Healthy", LastGood: rev(5)})
	out, _ = eventually(t, 0, cli("fleet", "status")...)
	if !strings.Contains(out, "Rollout of main@sha1:000000000000: complete") {
		t.Errorf("fleet status after the folds:\n%s", out)
	}
}
