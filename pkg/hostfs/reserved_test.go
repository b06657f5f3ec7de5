package hostfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReserved: nothing written through the root reaches a reserved path
// (the state dir), by its own name or through a symlink; nothing above it
// is removed or replaced whole; reads, and writes beside it, go on.
func TestReserved(t *testing.T) {
	rootDir := t.TempDir()
	state := filepath.Join(rootDir, "var/lib/cs")
	for _, d := range []string{state, filepath.Join(rootDir, "var/lib/other")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(state, "state.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/var/lib/cs", filepath.Join(rootDir, "alias")); err != nil {
		t.Fatal(err)
	}
	r, err := Open(rootDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Reserve("/var/lib/cs")

	reserved := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrReserved) {
			t.Errorf("%s: got %v, want ErrReserved", what, err)
		}
	}
	// Into it, by its name and through the symlink (the Dir knows the path
	// it resolved to).
	for _, p := range []string{"/var/lib/cs/state.json", "/alias/state.json", "/var/lib/cs/procs"} {
		d, base, err := r.Parent(p, false)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = d.WriteTemp(base, strings.NewReader("x"), Attrs{Mode: 0o644, UID: -1, GID: -1})
		reserved("write "+p, err)
		reserved("remove "+p, d.Remove(base))
		reserved("mkdir "+p, d.Mkdir(base, 0o755))
		reserved("chmod "+p, d.SetAttrs(base, Attrs{Mode: 0o644, UID: -1, GID: -1}))
		reserved("symlink "+p, d.Symlink("/x", base))
		d.Close()
	}
	// Above it: removed, replaced, renamed or backed up whole, never.
	lib, err := r.OpenDir("/var")
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	reserved("remove all /var/lib", lib.RemoveAll("lib"))
	reserved("rename /var/lib", lib.Rename("lib", "lib.old"))
	reserved("replace /var/lib", lib.Reserved("lib"))
	reserved("symlink over /var/lib", lib.Symlink("/srv", "lib"))
	top, err := r.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()
	reserved("remove all /var", top.RemoveAll("var"))
	if _, err := os.Stat(filepath.Join(state, "state.json")); err != nil {
		t.Fatalf("the state dir lost its snapshot: %v", err)
	}
	if _, err := os.Stat(filepath.Join(rootDir, "var/lib/other")); err != nil {
		t.Fatalf("a removal refused whole removed a sibling first: %v", err)
	}

	// Beside it, and the attributes of a directory above it: as usual.
	write(t, lib, "lib-sibling", "ok")
	if err := lib.SetAttrs("lib", Attrs{Mode: 0o755, UID: -1, GID: -1}); err != nil {
		t.Errorf("chmod of a directory above the state dir: %v", err)
	}
	if err := lib.RemoveAll("lib-sibling"); err != nil {
		t.Error(err)
	}
	inLib, err := r.OpenDir("/var/lib")
	if err != nil {
		t.Fatal(err)
	}
	defer inLib.Close()
	if err := inLib.RemoveAll("other"); err != nil {
		t.Errorf("remove a sibling of the state dir: %v", err)
	}
	// Reads are not limited.
	f, err := r.OpenFile("/var/lib/cs/state.json")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}
