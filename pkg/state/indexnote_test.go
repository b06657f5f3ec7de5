package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// forgetChecks clears what this process remembers of the bases it
// checked, as a fresh process starts.
func forgetChecks() {
	checked.mu.Lock()
	clear(checked.m)
	checked.mu.Unlock()
}

// TestIndexCheckNote: a base checked whole is noted beside it, and a
// fresh process trusts the note for that very file, not checking it
// again; a note of another file (the base replaced), a note cut short,
// and `state check` check the base whole. Removing the index removes its
// note.
func TestIndexCheckNote(t *testing.T) {
	d := At(t.TempDir())
	p := d.File("trees/Directory.kb.idx")
	notePath := p.Path() + checkedSuffix
	x := sampleIndex()
	n := x.Len()
	if err := x.Save(p); err != nil {
		t.Fatal(err)
	}
	load := func() int {
		t.Helper()
		forgetChecks()
		x, err := LoadIndex(p)
		if err != nil {
			t.Fatal(err)
		}
		return x.Len()
	}
	// Too new to tell a later write by: checked, not noted.
	if got := load(); got != n {
		t.Fatalf("loaded %d entries, want %d", got, n)
	}
	if _, err := os.Stat(notePath); !os.IsNotExist(err) {
		t.Fatalf("a base written %v ago was noted: %v", racyMargin, err)
	}
	time.Sleep(2 * racyMargin)
	if got := load(); got != n {
		t.Fatalf("loaded %d entries, want %d", got, n)
	}
	raw, err := os.ReadFile(notePath)
	if err != nil {
		t.Fatalf("no note of the check: %v", err)
	}
	if fi, err := os.Stat(notePath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("note: %v, %v; want mode 0600", fi.Mode(), err)
	}
	// What the note says is what a fresh process goes by: a note that
	// counts one entry less (no cortex-sync writes one) shows in Len.
	note, ok := decodeCheckNote(raw)
	if !ok || note.base.live != n {
		t.Fatalf("note %+v (ok %v), want %d live", note, ok, n)
	}
	note.base.live = n - 1
	forged := encodeCheckNote(note)
	if err := os.WriteFile(notePath, forged, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := load(); got != n-1 {
		t.Fatalf("with the note: %d entries, want the noted %d", got, n-1)
	}
	// state check goes by the base alone.
	found := false
	for _, f := range d.Check() {
		if f.File == "trees/Directory.kb.idx" {
			found = true
			if !strings.HasPrefix(f.What, plural(n, "entry")+",") {
				t.Errorf("state check: %q, want %q", f.What, plural(n, "entry"))
			}
		}
	}
	if !found {
		t.Error("state check did not look at the index")
	}
	// Cut short: checked whole (and noted again).
	if err := os.WriteFile(notePath, forged[:noteSize-1], 0o600); err != nil {
		t.Fatal(err)
	}
	if got := load(); got != n {
		t.Errorf("with a torn note: %d entries, want %d", got, n)
	}
	// The note of a base since replaced (another inode) is not its.
	if err := os.WriteFile(notePath, forged, 0o600); err != nil {
		t.Fatal(err)
	}
	other := NewIndex()
	other.Set("only/file", &IndexEntry{Stat: hostfs.Stat{Ino: 1, Size: 1, Mode: 0o644}, ContentID: "git:1"})
	q := d.File("trees/other.idx")
	if err := other.Save(q); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(q.Path(), p.Path()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * racyMargin)
	if got := load(); got != 1 {
		t.Errorf("a base replaced under its note: %d entries, want 1", got)
	}
	x, err = LoadIndex(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Remove(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(filepath.Dir(p.Path())); len(left) != 0 {
		t.Errorf("left beside a removed index: %v", left)
	}
}
