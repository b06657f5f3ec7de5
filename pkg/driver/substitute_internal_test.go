package driver

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// TestRenderedTree: a rendered file keeps its template's mode and has the
// rendered size, content and ID, through a whole walk, a scoped walk (a
// watch event's) and the tree's fs.FS; everything else is the tree's.
func TestRenderedTree(t *testing.T) {
	dir := t.TempDir()
	site := filepath.Join(dir, "site")
	os.MkdirAll(site, 0o755)
	os.WriteFile(filepath.Join(site, "run.sh"), []byte("#!/bin/sh\necho ${host.name}\n"), 0o755)
	os.WriteFile(filepath.Join(site, "plain.txt"), []byte("plain\n"), 0o644)
	os.Symlink("run.sh", filepath.Join(site, "link"))
	co, err := (&source.Dir{Dir: dir, Cache: state.At(t.TempDir())}).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	rendered := "#!/bin/sh\necho web1\n"
	tree := &renderedTree{Tree: co.Tree, files: map[string]string{"site/run.sh": rendered}}
	check := func(how string, e source.Entry) {
		t.Helper()
		switch e.Path {
		case "run.sh":
			id, err := e.ID()
			if err != nil || id != source.ContentDigest([]byte(rendered)) || e.Size != int64(len(rendered)) || e.Mode.Perm() != 0o755 {
				t.Errorf("%s: run.sh: id %s (%v), size %d, mode %v", how, id, err, e.Size, e.Mode)
			}
			if open := e.OpenFunc(); open != nil {
				rc, _ := open()
				b, _ := io.ReadAll(rc)
				rc.Close()
				if string(b) != rendered {
					t.Errorf("%s: run.sh reads %q", how, b)
				}
			}
		case "plain.txt":
			if id, _ := e.ID(); id != source.ContentDigest([]byte("plain\n")) {
				t.Errorf("%s: plain.txt: id %s", how, id)
			}
		case "link":
			if e.Mode&fs.ModeSymlink == 0 || e.Target != "run.sh" {
				t.Errorf("%s: link: mode %v, target %q", how, e.Mode, e.Target)
			}
		}
	}
	seen := 0
	if err := tree.Walk("site", func(e source.Entry) error { seen++; check("walk", e); return nil }); err != nil || seen != 3 {
		t.Fatalf("walk: %v, %d entries", err, seen)
	}
	if err := source.WalkScope(tree, "site", []string{"run.sh", "link", "plain.txt"}, func(e source.Entry) error { check("scoped walk", e); return nil }); err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(tree, "site/run.sh")
	if err != nil || string(b) != rendered {
		t.Fatalf("ReadFile: %q, %v", b, err)
	}
	if fi, err := fs.Stat(tree, "site/run.sh"); err != nil || fi.Size() != int64(len(rendered)) || fi.Mode().Perm() != 0o755 {
		t.Fatalf("Stat: %v, %v", fi, err)
	}
	if id, _ := tree.ContentID("site/run.sh"); id != source.ContentDigest([]byte(rendered)) {
		t.Fatalf("ContentID: %s", id)
	}
}
