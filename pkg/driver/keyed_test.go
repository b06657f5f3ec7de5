package driver_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// TestSensitiveKeyedIDs: a sensitive File is named in the snapshot only by
// IDs keyed with the host key; a snapshot an older cortex-sync wrote with
// unkeyed IDs is migrated by the next sync, with no change planned and no
// write to the file.
func TestSensitiveKeyedIDs(t *testing.T) {
	h := newHost(t)
	h.write(filepath.Join(h.repo, "f.yaml"), manifest+`kind: File
metadata: {name: pw}
spec: {path: /etc/pw, content: hunter2, sensitive: true}
`)
	h.sync()
	sum := sha256.Sum256([]byte("hunter2"))
	weak := hex.EncodeToString(sum[:])
	sd := state.At(h.stdir)
	snap, err := sd.Load()
	if err != nil {
		t.Fatal(err)
	}
	e := snap.Find("File/pw")
	if !strings.HasPrefix(e.ContentID, "hmac-sha256:") || !strings.HasPrefix(e.Live.SHA256, "hmac-sha256:") {
		t.Fatalf("recorded %q and %q, want keyed IDs", e.ContentID, e.Live.SHA256)
	}
	raw, _ := os.ReadFile(filepath.Join(h.stdir, "state.json"))
	if strings.Contains(string(raw), weak) {
		t.Fatal("state.json holds the unkeyed SHA-256 of the sensitive content")
	}

	// As an older cortex-sync recorded it: unkeyed.
	e.ContentID, e.Live.SHA256 = "sha256:"+weak, weak
	if err := sd.Save(snap); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(h.hostPath("/etc/pw"))
	if c := find(h.plan(false), "File/pw"); c.Action != diff.NoOp {
		t.Fatalf("an unkeyed record plans %s (%s), want no change", c.Action, c.Reason)
	}
	h.sync()
	after, _ := os.Stat(h.hostPath("/etc/pw"))
	if !os.SameFile(before, after) {
		t.Error("the migration rewrote the file")
	}
	snap, _ = sd.Load()
	if e := snap.Find("File/pw"); !strings.HasPrefix(e.ContentID, "hmac-sha256:") || !strings.HasPrefix(e.Live.SHA256, "hmac-sha256:") {
		t.Errorf("after a sync, recorded %q and %q, want keyed IDs", e.ContentID, e.Live.SHA256)
	}
	if c := find(h.plan(true), "File/pw"); c.Action != diff.NoOp {
		t.Errorf("status plans %s (%s), want no change", c.Action, c.Reason)
	}
	// Changed by hand: still seen (the keyed live fingerprint compares).
	h.write(h.hostPath("/etc/pw"), "hunter3")
	if c := find(h.plan(false), "File/pw"); c.Action != diff.Update {
		t.Errorf("a hand edit plans %s, want update", c.Action)
	}
}
