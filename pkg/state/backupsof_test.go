package state

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBackupsOf finds the copies of a path, newest first: of the path
// itself, and inside a directory copied whole; not a run without it, not
// a copy of another path, and never through a symlink planted in a run.
func TestBackupsOf(t *testing.T) {
	d := At(t.TempDir())
	put := func(run, p string) {
		t.Helper()
		f := filepath.Join(d.BackupsDir().Path(), run, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("was\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old, mid, late := "20261201T100000.000000000Z", "20261202T100000.000000000Z", "20261203T100000.000000000Z"
	put(old, "etc/motd")
	put(mid, "srv/kb/guide.md") // a directory copied whole holds it
	put(late, "etc/other")
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "motd"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(d.BackupsDir().Path(), "20261204T100000.000000000Z")
	if err := os.MkdirAll(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(planted, "etc")); err != nil {
		t.Fatal(err)
	}

	got, err := d.BackupsOf("/etc/motd")
	if err != nil || len(got) != 1 || got[0].Run != old || got[0].Path != filepath.Join(d.BackupsDir().Path(), old, "etc/motd") {
		t.Fatalf("BackupsOf(/etc/motd) = %+v, %v; want the copy in %s alone", got, err, old)
	}
	if want, _ := time.Parse(backupTime, old); !got[0].Time.Equal(want) {
		t.Errorf("time %s, want %s", got[0].Time, want)
	}
	put(late, "etc/motd")
	if got, _ = d.BackupsOf("/etc/motd"); len(got) != 2 || got[0].Run != late || got[1].Run != old {
		t.Errorf("two copies: %+v; want %s then %s", got, late, old)
	}
	if got, _ = d.BackupsOf("/srv/kb/guide.md"); len(got) != 1 || got[0].Run != mid {
		t.Errorf("inside a whole copy: %+v", got)
	}
	if got, _ = d.BackupsOf("/srv/kb/none"); len(got) != 0 {
		t.Errorf("no copy: %+v", got)
	}
	if got, err = At(t.TempDir()).BackupsOf("/etc/motd"); err != nil || len(got) != 0 {
		t.Errorf("no backups dir: %+v, %v", got, err)
	}
}
