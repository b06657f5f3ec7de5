package state

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestPlantedLinksAreRefused puts symlinks to a victim directory where
// the state dir keeps its trees, caches and logs, and to victim files
// where it keeps its own files: nothing is ever written through them.
func TestPlantedLinksAreRefused(t *testing.T) {
	victim := t.TempDir()
	d := At(t.TempDir())
	for _, sub := range []string{"trees", "cache", "logs"} {
		if err := os.Symlink(victim, filepath.Join(d.Path(), sub)); err != nil {
			t.Fatal(err)
		}
	}
	writes := map[string]error{
		"trees/Directory.kb.idx": d.WriteFile("trees/Directory.kb.idx", []byte("x")),
		"cache/dir-1.idx":        d.WriteFile("cache/dir-1.idx", []byte("x")),
		"logs/command-a.log": func() error {
			f, err := d.OpenLog("logs/command-a.log")
			if err == nil {
				f.Close()
			}
			return err
		}(),
	}
	for name, err := range writes {
		if !errors.Is(err, ErrSymlink) {
			t.Errorf("%s through a planted link: %v, want an error wrapping ErrSymlink", name, err)
		}
	}
	if _, err := d.ReadFile("trees/Directory.kb.idx"); !errors.Is(err, ErrSymlink) {
		t.Errorf("a file read through a planted link: %v", err)
	}

	// The state dir's own files: a link there is replaced, or refused,
	// never written through.
	bait := filepath.Join(victim, "bait")
	if err := os.WriteFile(bait, []byte("the victim's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"state.json", "state.serial", "lock", HostKeyFile} {
		os.Symlink(bait, filepath.Join(d.Path(), name))
	}
	s, err := d.Load()
	if !errors.Is(err, ErrSymlink) {
		t.Errorf("state.json a link: loaded %v, %v", s, err)
	}
	if _, err := d.Lock(context.Background(), 0); !errors.Is(err, ErrSymlink) {
		t.Errorf("lock a link: %v", err)
	}
	if _, err := d.HostKey(); !errors.Is(err, ErrSymlink) {
		t.Errorf("host.key a link: %v", err)
	}
	if err := d.Save(&Snapshot{Lineage: "l", Inventory: []*Entry{{ID: "File/a"}}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"state.json", "state.serial"} {
		if fi, err := os.Lstat(filepath.Join(d.Path(), name)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s after a save: %v, %v; want the link replaced by a file", name, fi, err)
		}
	}
	if data, _ := os.ReadFile(bait); string(data) != "the victim's\n" {
		t.Errorf("written through a link: %q", data)
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 1 {
		t.Errorf("the victim dir holds %v", entries)
	}
}
