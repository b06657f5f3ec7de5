package index

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

func TestCheckAndRepair(t *testing.T) {
	d := saved(t)
	os.MkdirAll(d.Sub("trees").Path(), 0o700)
	if err := New().Save(d.File("trees/Directory.kb.idx")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(d.Sub("trees").Path(), "Directory.bad.idx"), []byte("junk"), 0o600)
	os.WriteFile(filepath.Join(d.Path(), ".cortex-sync-state.json.1"), []byte("half"), 0o600)
	problems := func(fs []state.Finding) (n int) {
		for _, f := range fs {
			if !f.OK {
				n++
			}
		}
		return n
	}
	fs := d.Check(Check)
	if problems(fs) != 2 {
		t.Fatalf("want a corrupt index and a temp file: %+v", fs)
	}
	done, err := d.Repair(fs)
	if err != nil || len(done) != 2 {
		t.Fatalf("repair: %+v %v", done, err)
	}
	if fs := d.Check(Check); problems(fs) != 0 {
		t.Fatalf("after repair: %+v", fs)
	}
	os.WriteFile(d.File("state.json").Path(), []byte("{}"), 0o600)
	fs = d.Check(Check)
	if problems(fs) != 1 || fs[0].Repairable {
		t.Fatalf("a damaged snapshot is not repairable: %+v", fs)
	}
	if done, _ := d.Repair(fs); len(done) != 0 || readString(t, d.File("state.json").Path()) != "{}" {
		t.Fatal("repair touched the snapshot")
	}
}

func readString(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestIndexThroughPlantedLinkIsRefused: a symlink planted where the state
// dir keeps its trees is never written or read through.
func TestIndexThroughPlantedLinkIsRefused(t *testing.T) {
	victim := t.TempDir()
	d := state.At(t.TempDir())
	if err := os.Symlink(victim, filepath.Join(d.Path(), "trees")); err != nil {
		t.Fatal(err)
	}
	x := NewAt(d.File("trees/Directory.kb.idx"))
	x.Set("a", &Entry{Stat: hostfs.Stat{Ino: 1, Mode: 0o644}, SHA256: "ab", ContentID: "git:1"})
	if err := x.Save(d.File("trees/Directory.kb.idx")); !errors.Is(err, state.ErrSymlink) {
		t.Errorf("an index written through a planted link: %v, want an error wrapping state.ErrSymlink", err)
	}
	if _, err := Load(d.File("trees/Directory.kb.idx")); !errors.Is(err, state.ErrSymlink) {
		t.Errorf("an index read through a planted link: %v", err)
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 0 {
		t.Errorf("the victim dir holds %v", entries)
	}
}
