package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// saved is a state dir holding a snapshot with one entry, saved n times.
func saved(t *testing.T, n int) (Dir, *Snapshot) {
	t.Helper()
	d := At(filepath.Join(t.TempDir(), "state"))
	s, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	s.Put(&Entry{ID: "File/a", Kind: "File", Path: "/a", Created: true})
	for range n {
		if err := d.Save(s); err != nil {
			t.Fatal(err)
		}
	}
	return d, s
}

func read(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRollbackDetected(t *testing.T) {
	d, s := saved(t, 2)
	old := read(t, d.File(snapshotFile).Path())
	for range 3 {
		if err := d.Save(s); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(d.File(serialFileName).Path()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state.serial: %v %v", fi, err)
	}
	if got, err := d.Load(); err != nil || got.Rollback() != nil {
		t.Fatalf("the last snapshot written: %v %v", err, got.Rollback())
	}
	// The older snapshot is put back.
	if err := os.WriteFile(d.File(snapshotFile).Path(), old, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	rb := got.Rollback()
	if !errors.Is(rb, ErrRollback) || !strings.Contains(rb.Error(), "state.json has serial 2, but this state dir last wrote serial 5") {
		t.Fatalf("rollback: %v", rb)
	}
	// Saves (a sync without --prune) do not launder it, however many.
	for range 10 {
		if err := d.Save(got); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ = d.Load(); got.Rollback() == nil {
		t.Fatal("saves laundered the rollback")
	}
	// Accepted, it is the current snapshot; serials keep growing.
	d.AcceptRollback(got)
	if err := d.Save(got); err != nil {
		t.Fatal(err)
	}
	if got.Serial <= 12 {
		t.Errorf("serial %d after accepting: serials must grow past every one written", got.Serial)
	}
	if got, _ = d.Load(); got.Rollback() != nil || got.RolledBack != "" {
		t.Fatalf("after accepting: %v", got.Rollback())
	}
}

func TestRollbackOtherLineage(t *testing.T) {
	d, _ := saved(t, 1)
	other, _ := saved(t, 3)
	if err := os.WriteFile(d.File(snapshotFile).Path(), read(t, other.File(snapshotFile).Path()), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	if rb := got.Rollback(); rb == nil || !strings.Contains(rb.Error(), "copied from elsewhere or put back") {
		t.Fatalf("another lineage: %v", rb)
	}
}

func TestNoRollback(t *testing.T) {
	// A snapshot newer than state.serial (killed between the two writes),
	// one with no state.serial (written before it existed), and an empty
	// one (nothing to prune) are not rollbacks.
	d, s := saved(t, 2)
	serial := read(t, d.File(serialFileName).Path())
	if err := d.Save(s); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(d.File(serialFileName).Path(), serial, 0o600)
	if got, _ := d.Load(); got.Rollback() != nil {
		t.Errorf("newer than state.serial: %v", got.Rollback())
	}
	os.Remove(d.File(serialFileName).Path())
	if got, _ := d.Load(); got.Rollback() != nil {
		t.Errorf("no state.serial: %v", got.Rollback())
	}
	d2, _ := saved(t, 3)
	os.Remove(d2.File(snapshotFile).Path())
	if got, _ := d2.Load(); got.Rollback() != nil {
		t.Errorf("state.json moved away: %v", got.Rollback())
	}
	os.WriteFile(d2.File(serialFileName).Path(), []byte("garbage"), 0o600)
	d3, _ := saved(t, 1)
	os.WriteFile(d3.File(serialFileName).Path(), []byte("garbage"), 0o600)
	if got, _ := d3.Load(); got.Rollback() == nil {
		t.Error("a damaged state.serial is not trusted")
	}
}

func TestCreating(t *testing.T) {
	s := &Snapshot{}
	if !s.Intend([]Creation{{ID: "File/a", Path: "/a"}, {ID: "File/b", Path: "/b"}}) || s.Intend([]Creation{{ID: "File/a", Path: "/a"}}) {
		t.Fatal("Intend reports only new creations")
	}
	if !s.Intended("File/a", "/a") || s.Intended("File/a", "/elsewhere") {
		t.Fatal("Intended matches ID and path")
	}
	s.Put(&Entry{ID: "File/a"})
	s.Settle(func(id string) bool { return true })
	if s.Intended("File/a", "/a") || !s.Intended("File/b", "/b") {
		t.Fatalf("recorded creations are settled, others kept: %+v", s.Creating)
	}
	s.Settle(func(id string) bool { return false })
	if s.Creating != nil {
		t.Fatalf("creations no longer desired are dropped: %+v", s.Creating)
	}
}

func TestBackupRetention(t *testing.T) {
	d := At(t.TempDir())
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	var names []string
	for _, age := range []time.Duration{0, time.Hour, 10 * 24 * time.Hour, 40 * 24 * time.Hour, 50 * 24 * time.Hour, 400 * 24 * time.Hour} {
		name := now.Add(-age).Format(backupTime)
		names = append(names, name)
		os.MkdirAll(filepath.Join(d.Sub("backups").Path(), name, "etc"), 0o700)
		os.WriteFile(filepath.Join(d.Sub("backups").Path(), name, "etc", "x"), []byte("12345"), 0o600)
	}
	runs, err := d.Backups()
	if err != nil || len(runs) != 6 || runs[0].Name != names[0] || runs[0].Files != 1 || runs[0].Bytes != 5 {
		t.Fatalf("list: %+v %v", runs, err)
	}
	if gone, _ := d.PruneBackups(Retention{Keep: 4, MaxAge: 0}, now); len(gone) != 0 {
		t.Fatalf("max age 0 keeps everything: %+v", gone)
	}
	gone, err := d.PruneBackups(Retention{Keep: 4, MaxAge: 30 * 24 * time.Hour}, now)
	if err != nil || len(gone) != 2 || gone[0].Name != names[4] || gone[1].Name != names[5] {
		t.Fatalf("keep 4 newest or a month: gone %+v %v", gone, err)
	}
	gone, _ = d.PruneBackups(Retention{Keep: 1, MaxAge: 30 * 24 * time.Hour}, now)
	if len(gone) != 1 || gone[0].Name != names[3] {
		t.Fatalf("keep 1 or a month: gone %+v", gone)
	}
}
