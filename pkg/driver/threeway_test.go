package driver_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// host is a repository, a root and a state dir in temp dirs, planned and
// applied through the engine (reconcile.Session) the way the CLI does it.
type host struct {
	t                 *testing.T
	repo, root, stdir string
	opts              resource.Options // how the manifests load
}

func newHost(t *testing.T) *host {
	return &host{t: t, repo: t.TempDir(), root: t.TempDir(), stdir: t.TempDir()}
}

func (h *host) write(p, data string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// hostPath is p on the sandboxed host.
func (h *host) hostPath(p string) string { return filepath.Join(h.root, p) }

// session opens what a command opens; with recall, the desired state is
// what the snapshot recorded (status without a source).
func (h *host) session(recall, write bool) *reconcile.Session {
	h.t.Helper()
	ctx := context.Background()
	var d *reconcile.Desired
	if !recall {
		var err error
		if d, err = reconcile.Load(ctx, &source.Dir{Dir: h.repo, Cache: state.At(filepath.Join(h.stdir, "cache"))}, h.opts, nil); err != nil {
			h.t.Fatal(err)
		}
		h.t.Cleanup(func() { d.Close() })
	}
	s, err := reconcile.Open(ctx, reconcile.Config{Root: h.root, StateDir: h.stdir, Concurrency: 2, LockTimeout: time.Second}, d, write)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { s.Close() })
	return s
}

// engine is the driver host of a session, its desired set and a view of
// its snapshot, for a test that plans by hand.
func (h *host) engine(recall bool) (driver.Host, *resource.Set, *state.Snapshot, func()) {
	h.t.Helper()
	s := h.session(recall, false)
	hst := s.Host()
	hst.Env.Snapshot = s.View()
	set := hst.Env.Set
	if recall {
		var unknown []*diff.Change
		set, hst.Env.Snapshot, unknown = hst.RecallAll(hst.Env.Snapshot)
		if len(unknown) > 0 {
			h.t.Fatalf("could not recall %s: %s", unknown[0].ID, unknown[0].Err)
		}
		hst.Env.Set = set
	}
	return hst, set, hst.Env.Snapshot, func() {}
}

// plan is what diff shows, from the source or recalled.
func (h *host) plan(recall bool) *diff.Plan {
	h.t.Helper()
	return h.session(recall, false).Plan(context.Background())
}

// sync applies the plan from the source, with prune.
func (h *host) sync() *apply.Report {
	h.t.Helper()
	s := h.session(false, true)
	defer s.Close() // the lock goes now: the next session takes it
	s.Policy = reconcile.Policy{Prune: true, WaitTimeout: time.Second}
	rep, err := s.Sync(context.Background(), s.Plan(context.Background()), state.Retention{})
	if err != nil {
		h.t.Fatal(err)
	}
	return rep
}

const manifest = "apiVersion: cortex-sync/v1alpha1\n"

// TestThreeWay runs every kind through desired × record × live: for each
// way the host can be changed after a sync, the plan from the source says
// what it should, and status without a source (the desired state recalled
// from the snapshot) reaches the same judgement.
func TestThreeWay(t *testing.T) {
	files := manifest + `kind: File
metadata: {name: managed}
spec: {path: /etc/managed, content: "one\n", mode: "0640"}
---
` + manifest + `kind: File
metadata: {name: loose}
spec: {path: /etc/loose, content: "one\n"}
---
` + manifest + `kind: Directory
metadata: {name: kb}
spec: {path: /srv/kb, source: kb, purge: true}
---
` + manifest + `kind: Directory
metadata: {name: plain}
spec: {path: /srv/plain, mode: "0750"}
---
` + manifest + `kind: Symlink
metadata: {name: current}
spec: {path: /srv/current, target: /srv/kb}
---
` + manifest + `kind: Command
metadata: {name: ok}
spec: {command: [sh, -c, "true"]}
`
	tests := []struct {
		name   string
		id     resource.ID
		change func(h *host)
		action diff.Action
		reason diff.Reason
	}{
		{"file in sync", "File/managed", func(h *host) {}, diff.NoOp, diff.NoReason},
		{"file edited, same size and mtime", "File/managed", func(h *host) {
			p := h.hostPath("etc/managed")
			st, _ := os.Stat(p)
			h.write(p, "two\n")
			os.Chtimes(p, st.ModTime(), st.ModTime())
		}, diff.Update, diff.Drifted},
		{"file chmod, mode managed", "File/managed", func(h *host) { os.Chmod(h.hostPath("etc/managed"), 0o600) }, diff.Update, diff.Drifted},
		{"file chmod, no mode in the manifest: the mode is the host's", "File/loose", func(h *host) { os.Chmod(h.hostPath("etc/loose"), 0o600) }, diff.NoOp, diff.NoReason},
		{"file deleted", "File/managed", func(h *host) { os.Remove(h.hostPath("etc/managed")) }, diff.Create, diff.MissingOnHost},
		{"file replaced by a directory", "File/managed", func(h *host) {
			os.Remove(h.hostPath("etc/managed"))
			os.Mkdir(h.hostPath("etc/managed"), 0o755)
		}, diff.Update, diff.Drifted},
		{"mirror file edited", "Directory/kb", func(h *host) { h.write(h.hostPath("srv/kb/a.md"), "hacked, longer\n") }, diff.Update, diff.Drifted},
		{"mirror file deleted", "Directory/kb", func(h *host) { os.Remove(h.hostPath("srv/kb/sub/b.md")) }, diff.Update, diff.Drifted},
		{"mirror symlink retargeted", "Directory/kb", func(h *host) {
			os.Remove(h.hostPath("srv/kb/link"))
			os.Symlink("elsewhere", h.hostPath("srv/kb/link"))
		}, diff.Update, diff.Drifted},
		{"mirror stray file, purge", "Directory/kb", func(h *host) { h.write(h.hostPath("srv/kb/stray.md"), "x") }, diff.Update, diff.Unmanaged},
		{"directory chmod", "Directory/plain", func(h *host) { os.Chmod(h.hostPath("srv/plain"), 0o700) }, diff.Update, diff.Drifted},
		{"directory deleted", "Directory/plain", func(h *host) { os.Remove(h.hostPath("srv/plain")) }, diff.Create, diff.MissingOnHost},
		{"symlink retargeted", "Symlink/current", func(h *host) {
			os.Remove(h.hostPath("srv/current"))
			os.Symlink("/tmp", h.hostPath("srv/current"))
		}, diff.Update, diff.Drifted},
		{"symlink replaced by a file", "Symlink/current", func(h *host) {
			os.Remove(h.hostPath("srv/current"))
			h.write(h.hostPath("srv/current"), "x")
		}, diff.Update, diff.Drifted},
		{"command ran", "Command/ok", func(h *host) {}, diff.NoOp, diff.NoReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t)
			h.write(filepath.Join(h.repo, "all.yaml"), files)
			h.write(filepath.Join(h.repo, "kb/a.md"), "a\n")
			h.write(filepath.Join(h.repo, "kb/sub/b.md"), "b\n")
			os.Symlink("a.md", filepath.Join(h.repo, "kb/link"))
			if rep := h.sync(); rep.Failed() {
				t.Fatalf("first sync failed: %+v", rep.Results)
			}
			tt.change(h)
			for _, recall := range []bool{false, true} {
				c := find(h.plan(recall), tt.id)
				if c == nil {
					t.Fatalf("recall=%v: %s not in the plan", recall, tt.id)
				}
				if c.Err != nil || c.Action != tt.action || c.Reason != tt.reason {
					t.Errorf("recall=%v: planned %s (%s) %s, want %s (%s)", recall, c.Action, c.Reason, c.Err, tt.action, tt.reason)
				}
			}
			// Sync converges it, and then both judge it in sync.
			if rep := h.sync(); rep.Failed() {
				t.Fatalf("healing sync failed: %+v", rep.Results)
			}
			for _, recall := range []bool{false, true} {
				if c := find(h.plan(recall), tt.id); c.Pending() || c.Err != nil {
					t.Errorf("recall=%v: after sync, still %s (%s) %s", recall, c.Action, c.Reason, c.Err)
				}
			}
		})
	}
}

// TestCommandFailureAgrees: a failed command is retried, from the source
// and recalled alike, and shows Degraded with its outcome.
func TestCommandFailureAgrees(t *testing.T) {
	h := newHost(t)
	h.write(filepath.Join(h.repo, "c.yaml"), manifest+"kind: Command\nmetadata: {name: slow}\nspec: {command: [sleep, \"5\"], timeout: 100ms}\n")
	if rep := h.sync(); !rep.Failed() {
		t.Fatal("a command that runs into its timeout must fail")
	}
	for _, recall := range []bool{false, true} {
		c := find(h.plan(recall), "Command/slow")
		if c.Action != diff.Run || c.Reason != diff.Retry || c.Health != "Degraded" || c.Detail != "timed out after 100ms" {
			t.Errorf("recall=%v: %s (%s) %s %q", recall, c.Action, c.Reason, c.Health, c.Detail)
		}
	}
}

func find(p *diff.Plan, id resource.ID) *diff.Change {
	for _, c := range p.Changes {
		if c.ID == id {
			return c
		}
	}
	return nil
}
