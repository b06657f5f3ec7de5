package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// saveAndApply makes a saved plan with policy, lets edit change its bytes,
// and applies it as sync --plan does.
func (h *host) saveAndApply(policy diff.SavedPolicy, edit func([]byte) []byte) error {
	h.t.Helper()
	ctx := context.Background()
	open := func(write bool) (*reconcile.Session, func()) {
		src := &source.Dir{Dir: h.repo, Cache: state.At(filepath.Join(h.stdir, "cache"))}
		d, err := reconcile.Load(ctx, src, resource.Options{}, nil)
		if err != nil {
			h.t.Fatal(err)
		}
		s, err := reconcile.Open(ctx, reconcile.Config{Root: h.root, StateDir: h.stdir, Concurrency: 2, LockTimeout: time.Second}, d, write)
		if err != nil {
			h.t.Fatal(err)
		}
		return s, func() { s.Close(); d.Close() }
	}
	s, done := open(false)
	plan := s.Plan(ctx)
	s.Warn(plan, reconcile.Policy{AllowEmpty: policy.AllowEmpty, AllowSourceChange: policy.AllowSourceChange})
	var b bytes.Buffer
	if err := diff.WriteSaved(&b, plan, s.MadeFor(), policy); err != nil {
		h.t.Fatal(err)
	}
	done()
	saved, err := diff.ReadSaved(bytes.NewReader(edit(b.Bytes())), 0)
	if err != nil {
		h.t.Fatal(err)
	}
	s, done = open(true)
	defer done()
	_, err = s.SyncSaved(ctx, saved, state.Retention{})
	return err
}

// A saved plan's policy is bound by the prunes it decides: flipped after
// review, the plan is refused, naming it, and nothing is deleted; as
// made, it applies and keeps what it showed kept.
func TestSyncSavedBindsPolicy(t *testing.T) {
	h := newHost(t)
	h.file("a", "/etc/a", "one")
	h.file("b", "/etc/b", "bee")
	h.run(false, reconcile.Policy{})
	os.Remove(filepath.Join(h.repo, "b.yaml"))
	h.file("a", "/etc/a", "two")

	flip := func(b []byte) []byte {
		return bytes.Replace(b, []byte(`"policy": {`+"\n"+`    "prune": false`), []byte(`"policy": {`+"\n"+`    "prune": true`), 1)
	}
	err := h.saveAndApply(diff.SavedPolicy{}, flip)
	if !errors.Is(err, reconcile.ErrPlanMoved) || !strings.Contains(err.Error(), "policy.prune: the plan file says true; it was planned with false (File/b)") {
		t.Fatalf("a flipped policy: %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.root, "etc/b")); err != nil {
		t.Fatalf("the plan kept /etc/b: %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(h.root, "etc/a")); string(data) != "one" {
		t.Fatalf("/etc/a is %q after a refusal", data)
	}

	if err := h.saveAndApply(diff.SavedPolicy{}, func(b []byte) []byte { return b }); err != nil {
		t.Fatalf("the plan as made: %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.root, "etc/b")); err != nil {
		t.Fatalf("the plan kept /etc/b: %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(h.root, "etc/a")); string(data) != "two" {
		t.Fatalf("/etc/a is %q, want two", data)
	}
}
