package hostfs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

func write(t *testing.T, d *Dir, name, content string) {
	t.Helper()
	tmp, _, err := d.WriteTemp(name, strings.NewReader(content), Attrs{Mode: 0o644, UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

func TestConfinement(t *testing.T) {
	outside := t.TempDir()
	rootDir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(rootDir, "run"), 0o755))
	must(os.MkdirAll(filepath.Join(rootDir, "var"), 0o755))
	// An absolute symlink, as on a real host: /var/run -> /run.
	must(os.Symlink("/run", filepath.Join(rootDir, "var/run")))
	// Planted escapes: relative and absolute, both pointing at the real outside.
	must(os.Symlink("../../../../../../.."+outside, filepath.Join(rootDir, "rel")))
	must(os.Symlink(outside, filepath.Join(rootDir, "abs")))
	// What those links name, inside the root.
	must(os.MkdirAll(filepath.Join(rootDir, outside), 0o755))

	r, err := Open(rootDir, nil)
	must(err)
	defer r.Close()

	tests := []struct {
		path     string
		resolved string // in-root directory the parent resolved to
	}{
		{"/var/run/app.pid", "/run"},
		{"/rel/x", outside},
		{"/abs/x", outside},
		{"/new/dir/x", "/new/dir"},
	}
	for _, tt := range tests {
		d, base, err := r.Parent(tt.path, true)
		if err != nil {
			t.Fatalf("%s: %v", tt.path, err)
		}
		if d.Path() != tt.resolved {
			t.Errorf("%s: parent resolved to %s, want %s", tt.path, d.Path(), tt.resolved)
		}
		write(t, d, base, "data")
		d.Close()
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("write escaped the root: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(rootDir, "run/app.pid")); err != nil {
		t.Fatalf("absolute symlink not followed inside the root: %v", err)
	}
}

func TestAllowedPathsCheckTheResolvedPath(t *testing.T) {
	rootDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootDir, "srv/app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(rootDir, "srv/app/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(rootDir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := Open(rootDir, []string{"/srv/app"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	if _, _, err := r.Parent("/srv/app/link/passwd", true); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("write through a symlink out of the allowed path: err = %v, want ErrNotAllowed", err)
	}
	if _, _, err := r.Parent("/etc/passwd", true); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("write outside the allowed path: err = %v, want ErrNotAllowed", err)
	}
	if _, _, err := r.Parent("/opt/x/y", true); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("mkdir outside the allowed path: err = %v, want ErrNotAllowed", err)
	}
	if _, err := os.Stat(filepath.Join(rootDir, "opt")); !os.IsNotExist(err) {
		t.Fatalf("a refused write still created /opt: %v", err)
	}
	d, _, err := r.Parent("/srv/app/deep/config", true)
	if err != nil {
		t.Fatalf("write inside the allowed path: %v", err)
	}
	d.Close()
}

func TestRemoveAllDoesNotFollowSymlinks(t *testing.T) {
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	rootDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootDir, "tree/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(rootDir, "tree/sub/link")); err != nil {
		t.Fatal(err)
	}
	r, err := Open(rootDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d, base, err := r.Parent("/tree", false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.RemoveAll(base); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("RemoveAll followed a symlink: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(rootDir, "tree")); !os.IsNotExist(err) {
		t.Fatalf("tree not removed: %v", err)
	}
}

// HashFile hashes the whole file whatever size it is told: the size an
// lstat found ends the reading early only when it is the file's, and a
// stale one (the file grew or shrank since) reads to the end.
func TestHashFileSize(t *testing.T) {
	dir := t.TempDir()
	r, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d, err := r.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, n := range []int{0, 1, 100, 64<<10 - 1, 64 << 10, 64<<10 + 1, 200 << 10} {
		body := bytes.Repeat([]byte{'x'}, n)
		if n > 0 {
			body[n-1] = 'y'
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), body, 0o644); err != nil {
			t.Fatal(err)
		}
		want := sha256.Sum256(body)
		for _, size := range []int64{-1, int64(n), int64(n) - 1, int64(n) + 1, 0, 64 << 10} {
			got, err := d.HashFile("f", size)
			if err != nil {
				t.Fatal(err)
			}
			fast, err := d.XXH3File("f", size)
			if err != nil {
				t.Fatal(err)
			}
			wantXXH := xxh3.Hash128(body).Bytes()
			if got.SHA256 != hex.EncodeToString(want[:]) || got.XXH3 != wantXXH || fast != wantXXH {
				t.Errorf("%d bytes, told %d: %s %x and %x, want %x and %x", n, size, got.SHA256, got.XXH3, fast, want, wantXXH)
			}
		}
	}
}

func TestHashFileAndOpenDirRel(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("cortex"), 50000) // larger than one read buffer
	if err := os.WriteFile(filepath.Join(dir, "a", "b", "f"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	top, err := r.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()
	sub, err := top.OpenDirRel("a/b")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got, err := sub.HashFile("f", -1)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(body)
	if got.SHA256 != hex.EncodeToString(want[:]) {
		t.Errorf("HashFile = %s, want %x", got.SHA256, want)
	}
	if _, err := top.OpenDirRel("link/b"); err == nil {
		t.Error("OpenDirRel followed a symlink")
	}
	if _, err := sub.OpenDirRel("../../.."); err == nil {
		t.Error("OpenDirRel left the directory")
	}
}
