package index

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// beside lists dir's files but the notes of checks, which a load writes
// once the base is old enough (slow under load: at any time).
func beside(dir string) []os.DirEntry {
	left, _ := os.ReadDir(dir)
	return slices.DeleteFunc(left, func(e os.DirEntry) bool { return strings.HasSuffix(e.Name(), checkedSuffix) })
}

// forgetChecks clears what this process remembers of the bases it
// checked, as a fresh process starts.
func forgetChecks() {
	checked.mu.Lock()
	clear(checked.m)
	checked.mu.Unlock()
}

// TestIndexCheckNote: a base checked whole is noted beside it, and a
// fresh process trusts the note for that very file, not checking it
// again (a base damaged behind a note made for it loads, where state
// check finds the damage); a note of the file before a write, one cut
// short, one of a checker that checked less, and one of a base since
// replaced are not trusted. Removing the index removes its note.
func TestIndexCheckNote(t *testing.T) {
	d := state.At(t.TempDir())
	p := d.File("trees/Directory.kb.idx")
	notePath := p.Path() + checkedSuffix
	x := sampleIndex()
	n := x.Len()
	if err := x.Save(p); err != nil {
		t.Fatal(err)
	}
	load := func() (int, error) {
		t.Helper()
		forgetChecks()
		x, err := Load(p)
		if err != nil {
			return 0, err
		}
		return x.Len(), nil
	}
	identity := func() baseIdentity {
		t.Helper()
		f, err := os.Open(p.Path())
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		id, ok := checkedID(f, false, time.Now())
		if !ok {
			t.Fatal("no identity for the base")
		}
		return id
	}
	// Too new to tell a later write by: checked, not noted.
	if got, err := load(); err != nil || got != n {
		t.Fatalf("loaded %d entries, %v; want %d", got, err, n)
	}
	if _, err := os.Stat(notePath); !os.IsNotExist(err) {
		t.Fatalf("a base written just now was noted: %v", err)
	}
	time.Sleep(2 * racyMargin)
	if got, err := load(); err != nil || got != n {
		t.Fatalf("loaded %d entries, %v; want %d", got, err, n)
	}
	raw, err := os.ReadFile(notePath)
	if err != nil {
		t.Fatalf("no note of the check: %v", err)
	}
	if fi, err := os.Stat(notePath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("note: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if id, ok := decodeCheckNote(raw); !ok || id != identity() {
		t.Fatalf("note names %+v (ok %v), want %+v", id, ok, identity())
	}
	// Damage the base's last string in place: the note is of the file
	// before.
	f, err := os.OpenFile(p.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, fi.Size()-1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{last[0] ^ 1}, fi.Size()-1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	time.Sleep(2 * racyMargin)
	if _, err := load(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged after its note: %v, want ErrCorrupt", err)
	}
	// A note made for the damaged file is trusted: the load does not
	// check it (which is why only cortex-sync's checks write notes).
	forged := encodeCheckNote(identity())
	if err := os.WriteFile(notePath, forged, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := load(); err != nil || got != n {
		t.Fatalf("with a note of it: %d entries, %v; want the base trusted", got, err)
	}
	// state check goes by the base alone.
	found := false
	for _, f := range d.Check(Check) {
		if f.File == "trees/Directory.kb.idx" {
			found = true
			if f.OK || !strings.Contains(f.What, "checksum mismatch") {
				t.Errorf("state check: ok %v, %q; want the damage found", f.OK, f.What)
			}
		}
	}
	if !found {
		t.Error("state check did not look at the index")
	}
	for name, note := range map[string][]byte{
		"cut short":           forged[:noteSize-1],
		"of a lesser checker": slices.Concat(forged[:len(noteMagic)], []byte{noteChecks - 1}, forged[len(noteMagic)+1:]),
	} {
		if err := os.WriteFile(notePath, note, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := load(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("with a note %s: %v, want the base checked whole", name, err)
		}
	}
	// The note of a base since replaced (another inode) is not its.
	if err := os.WriteFile(notePath, forged, 0o600); err != nil {
		t.Fatal(err)
	}
	other := New()
	other.Set("only/file", &Entry{Stat: hostfs.Stat{Ino: 1, Size: 1, Mode: 0o644}, ContentID: "git:1"})
	q := d.File("trees/other.idx")
	if err := other.Save(q); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(q.Path(), p.Path()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * racyMargin)
	if got, err := load(); err != nil || got != 1 {
		t.Errorf("a base replaced under its note: %d entries, %v; want 1", got, err)
	}
	x, err = Load(p)
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
