package driver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// sopsData is pkg/sops's fixtures, made with the sops library.
var sopsData = filepath.Join("..", "sops", "testdata")

// hostAgeKey is a 0600 copy of the fixtures' age key (Git keeps it 0644,
// which the key's reader refuses).
func hostAgeKey(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sopsData, "host.agekey"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "host.agekey")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func sopsTree(t *testing.T, files map[string]string) source.Tree {
	t.Helper()
	dir := t.TempDir()
	for name, fixture := range files {
		b, err := os.ReadFile(filepath.Join(sopsData, fixture))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	co, err := (&source.Dir{Dir: dir}).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Close() })
	return co.Tree
}

// TestDecryptedID: a SOPS file is named by its plaintext, keyed with the
// host key: the same for a new encryption of the same plaintext, another
// for another plaintext; an observation of a blob decrypted before
// decrypts nothing.
func TestDecryptedID(t *testing.T) {
	tree := sopsTree(t, map[string]string{"a.yaml": "basic.yaml", "b.yaml": "rotated.yaml", "c.yaml": "regex.yaml"})
	d := NewDecrypter(hostAgeKey(t))
	env := &Env{Tree: tree, Decrypter: d, Keys: NewKeys(state.At(t.TempDir()))}
	ids := map[string]string{}
	for _, n := range []string{"a.yaml", "b.yaml", "c.yaml"} {
		id, err := env.decryptedID(n, n)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(id, keyedPrefix) {
			t.Fatalf("%s: %q is not keyed", n, id)
		}
		ids[n] = id
	}
	if ids["a.yaml"] != ids["b.yaml"] {
		t.Error("a key rotation changed the content ID")
	}
	if ids["a.yaml"] == ids["c.yaml"] {
		t.Error("another plaintext has the same content ID")
	}
	plain, _ := os.ReadFile(filepath.Join(sopsData, "basic.yaml.plain"))
	if raw := source.ContentDigest(plain); ids["a.yaml"] == raw || strings.Contains(ids["a.yaml"], strings.TrimPrefix(raw, "git:")) {
		t.Error("the content ID is the plaintext's unkeyed digest")
	}

	// Remembered: with the keys gone, what was decrypted is still named.
	d.keys = nil
	if id, err := env.decryptedID("a.yaml", "a.yaml"); err != nil || id != ids["a.yaml"] {
		t.Fatalf("a second look decrypted again: %q, %v", id, err)
	}
	// ... and the same blob under another format is not the same entry.
	tree2 := sopsTree(t, map[string]string{"a.json": "basic.yaml"})
	env.Tree = tree2
	if _, err := env.decryptedID("a.json", "a.json"); err == nil {
		t.Fatal("a YAML blob named .json was taken from the cache")
	}
}

// TestDecryptRefusals: each refusal reaches the driver as a clear error
// naming the file.
func TestDecryptRefusals(t *testing.T) {
	tree := sopsTree(t, map[string]string{"other.yaml": "other.yaml", "tampered.yaml": "tampered-removed.yaml"})
	env := &Env{Tree: tree, Decrypter: NewDecrypter(hostAgeKey(t)), Keys: NewKeys(state.At(t.TempDir()))}
	for name, want := range map[string]string{"other.yaml": "other.yaml: encrypted for age age1", "tampered.yaml": "tampered.yaml: MAC mismatch"} {
		if _, err := env.decryptedID(name, name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", name, err, want)
		}
	}
	env.Decrypter = NewDecrypter(filepath.Join(t.TempDir(), "none.agekey"))
	if _, err := env.decryptedID("other.yaml", "other.yaml"); err == nil || !strings.Contains(err.Error(), "none.agekey") {
		t.Errorf("a missing key file: got %v", err)
	}
}
