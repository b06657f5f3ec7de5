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
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// host is a repository, a root and a state dir in temp dirs, planned and
// applied the way the CLI does it.
type host struct {
	t                 *testing.T
	repo, root, stdir string
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

// engine opens what a command opens; with recall, the desired state is
// what the snapshot recorded (status without a source).
func (h *host) engine(recall bool) (driver.Host, *resource.Set, *state.Snapshot, func()) {
	h.t.Helper()
	ctx := context.Background()
	root, err := hostfs.Open(h.root, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	sd := state.Dir{Path: h.stdir}
	snap, err := sd.Load()
	if err != nil {
		h.t.Fatal(err)
	}
	env := &driver.Env{Root: root, State: sd, Snapshot: snap, Backups: &driver.Backups{Dir: sd.Sub("backups")}, Concurrency: 2}
	hst := driver.Host{Env: env}
	if recall {
		set, view, unknown := hst.RecallAll(snap)
		if len(unknown) > 0 {
			h.t.Fatalf("could not recall %s: %s", unknown[0].ID, unknown[0].Err)
		}
		env.Set = set
		return hst, set, view, func() { root.Close() }
	}
	src := &source.Dir{Dir: h.repo, CacheDir: filepath.Join(h.stdir, "cache")}
	co, err := src.Fetch(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	set, err := resource.Load(co.Tree, co.Path, driver.Kinds())
	if err != nil {
		h.t.Fatal(err)
	}
	env.Tree, env.Set = co.Tree, set
	snap.Source = src.Ref()
	return hst, set, snap, func() { co.Close(); root.Close() }
}

// plan is what diff shows, from the source or recalled.
func (h *host) plan(recall bool) *diff.Plan {
	h.t.Helper()
	hst, set, snap, done := h.engine(recall)
	defer done()
	return diff.Make(context.Background(), hst, set, snap, 2)
}

// sync applies the plan from the source, with prune.
func (h *host) sync() *apply.Report {
	h.t.Helper()
	hst, set, snap, done := h.engine(false)
	defer done()
	plan := diff.Make(context.Background(), hst, set, snap, 2)
	sd := state.Dir{Path: h.stdir}
	rep, err := apply.Run(context.Background(), hst, set, plan, snap, apply.Options{Prune: true, Concurrency: 2, Save: sd.Save, WaitTimeout: time.Second})
	if err != nil {
		h.t.Fatal(err)
	}
	return rep
}

func find(p *diff.Plan, id resource.ID) *diff.Change {
	for _, c := range p.Changes {
		if c.ID == id {
			return c
		}
	}
	return nil
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
		{"file in sync", "File/managed", func(h *host) {}, diff.NoOp, diff.InSync},
		{"file edited, same size and mtime", "File/managed", func(h *host) {
			p := h.hostPath("etc/managed")
			st, _ := os.Stat(p)
			h.write(p, "two\n")
			os.Chtimes(p, st.ModTime(), st.ModTime())
		}, diff.Update, diff.Drifted},
		{"file chmod, mode managed", "File/managed", func(h *host) { os.Chmod(h.hostPath("etc/managed"), 0o600) }, diff.Update, diff.Drifted},
		{"file chmod, no mode in the manifest: the mode is the host's", "File/loose", func(h *host) { os.Chmod(h.hostPath("etc/loose"), 0o600) }, diff.NoOp, diff.InSync},
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
		{"command ran", "Command/ok", func(h *host) {}, diff.NoOp, diff.InSync},
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
