package driver_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// TestLegacyContentIDs: a host synced by a cortex-sync that named a
// directory's and inline content by SHA-256 ("sha256:…") rather than by
// Git blob ID plans nothing after the upgrade: no file rewritten, no
// process restarted; the records are saved with the new IDs.
func TestLegacyContentIDs(t *testing.T) {
	h := newHost(t)
	h.write(filepath.Join(h.repo, "m.yaml"), manifest+`kind: File
metadata: {name: app}
spec: {path: /etc/app.conf, source: app.conf}
---
`+manifest+`kind: File
metadata: {name: inline}
spec: {path: /etc/inline.conf, content: "inline\n"}
---
`+manifest+`kind: Directory
metadata: {name: kb}
spec: {path: /srv/kb, source: kb}
---
`+manifest+`kind: Process
metadata: {name: web}
spec: {command: [sleep, "1400"], restartOn: [File/app, File/inline, Directory/kb], stopTimeout: 1s}
`)
	h.write(filepath.Join(h.repo, "app.conf"), "port = 8080\n")
	h.write(filepath.Join(h.repo, "kb/a.md"), "# A\n")
	if rep := h.sync(); rep.Failed() {
		t.Fatalf("sync: %+v", rep.Results)
	}
	t.Cleanup(func() {
		os.Remove(filepath.Join(h.repo, "m.yaml"))
		s := h.session(false, true)
		s.Policy.Prune, s.Policy.AllowEmpty = true, true
		s.Sync(context.Background(), s.Plan(context.Background()), state.Retention{})
	})

	// As the older cortex-sync recorded it.
	sd := state.At(h.stdir)
	snap, err := sd.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Inventory {
		if e.Kind == "File" && e.Live != nil {
			e.ContentID = "sha256:" + e.Live.SHA256
		}
	}
	hst, _, _, _ := h.engine(false)
	hst.Env.Snapshot = snap
	web := snap.Find("Process/web")
	var extra map[string]any
	json.Unmarshal(web.Extra, &extra)
	extra["hash"] = driver.LegacyHashes(hst.Env, hst.Env.Set.Get("Process/web"))
	web.Extra, _ = json.Marshal(extra)
	if err := sd.Save(snap); err != nil {
		t.Fatal(err)
	}
	idxFile := state.At(h.stdir).File("trees/Directory.kb.idx")
	idx, err := index.Load(idxFile)
	if err != nil {
		t.Fatal(err)
	}
	for p, e := range idx.All() {
		if e.SHA256 != "" {
			cp := *e
			cp.ContentID = "sha256:" + e.SHA256
			idx.Set(p, &cp)
		}
	}
	if err := idx.Save(idxFile); err != nil {
		t.Fatal(err)
	}
	// The supervisor runs the process with the hash it was started with.
	statusFile := filepath.Join(h.stdir, "procs", "web.json")
	b, _ := os.ReadFile(statusFile)
	var st map[string]any
	json.Unmarshal(b, &st)
	st["hash"] = extra["hash"]
	b, _ = json.Marshal(st)
	os.WriteFile(statusFile, b, 0o600)

	before, _ := os.Stat(h.hostPath("etc/app.conf"))
	plan := h.plan(false)
	for _, c := range plan.Changes {
		if c.Pending() {
			t.Errorf("%s: planned %s (%s) after the upgrade", c.ID, c.Action, c.Reason)
		}
	}
	if c := find(plan, "Process/web"); c.Action != diff.NoOp {
		t.Errorf("Process/web: %s", c.Action)
	}
	if rep := h.sync(); rep.Failed() {
		t.Fatalf("sync: %+v", rep.Results)
	}
	after, _ := os.Stat(h.hostPath("etc/app.conf"))
	if !os.SameFile(before, after) {
		t.Error("the upgrade rewrote /etc/app.conf")
	}
	snap, _ = sd.Load()
	if e := snap.Find("File/app"); !strings.HasPrefix(e.ContentID, "git:") {
		t.Errorf("File/app still recorded as %s", e.ContentID)
	}
}
