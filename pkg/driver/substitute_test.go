package driver_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// TestSubstituteSecret: a File rendered with a value from an encrypted
// vars file is sensitive: the plan shows no content, and the state dir
// holds neither the secret nor an unkeyed digest of it or of the file;
// a new secret is a change owed to that variable, still hidden.
func TestSubstituteSecret(t *testing.T) {
	h := newHost(t)
	secret := "hunter2"
	h.opts = resource.Options{Host: resource.Host{Name: "web1"}, Decrypt: func(name string, data []byte) ([]byte, error) {
		return []byte("password: " + secret + "\n"), nil
	}}
	h.write(filepath.Join(h.repo, "fleet.yaml"), manifest+`kind: Fleet
metadata: {name: prod}
spec:
  hosts:
    - match: {}
      paths: [base]
      vars: {user: app}
      varsFiles: [vars/secret.yaml]
`)
	h.write(filepath.Join(h.repo, "vars/secret.yaml"), "password: ENC[AES256_GCM,data:x]\nsops: {age: []}\n")
	h.write(filepath.Join(h.repo, "base/f.yaml"), manifest+`kind: File
metadata: {name: db}
spec:
  path: /etc/db.conf
  substitute: true
  content: |
    user=${user}
    password=${password}
`)
	c := find(h.plan(false), "File/db")
	if c.Content == nil || c.Content.Diff != "" || !strings.Contains(c.Content.Summary, "sensitive") {
		t.Fatalf("the plan shows %+v; want the content hidden", c.Content)
	}
	h.sync()
	got, _ := os.ReadFile(h.hostPath("/etc/db.conf"))
	if string(got) != "user=app\npassword=hunter2\n" {
		t.Fatalf("wrote %q", got)
	}
	snap, err := state.At(h.stdir).Load()
	if err != nil {
		t.Fatal(err)
	}
	e := snap.Find("File/db")
	if e.Vars == nil || !strings.HasPrefix(e.Vars.Vars["password"], "hmac-sha256:") || strings.HasPrefix(e.Vars.Vars["user"], "hmac-sha256:") {
		t.Fatalf("recorded %+v; want the secret's digest keyed, the other's not", e.Vars)
	}
	grepState(t, h.stdir, secret, got)

	// The secret rotates: a change owed to it, its content hidden.
	secret = "hunter3"
	c = find(h.plan(false), "File/db")
	if c.Action != diff.Update || c.Reason != diff.VarsChanged || c.Why() != "variable password changed" {
		t.Fatalf("a new secret plans %s (%s: %s)", c.Action, c.Reason, c.Why())
	}
	if c.Content == nil || c.Content.Diff != "" {
		t.Fatalf("the plan shows %+v", c.Content)
	}
	h.sync()
	got, _ = os.ReadFile(h.hostPath("/etc/db.conf"))
	grepState(t, h.stdir, secret, got)

	// The template changes with it: a change in Git.
	h.write(filepath.Join(h.repo, "base/f.yaml"), manifest+`kind: File
metadata: {name: db}
spec: {path: /etc/db.conf, substitute: true, content: "password=${password}\n"}
`)
	secret = "hunter4"
	if c := find(h.plan(false), "File/db"); c.Reason != diff.ChangedInGit {
		t.Fatalf("a new template plans %s (%s)", c.Action, c.Reason)
	}
}

// grepState fails when any file of the state dir holds the secret, or the
// unkeyed SHA-256 of it or of the file it was rendered into, or that
// file's unkeyed content ID.
func grepState(t *testing.T, dir, secret string, file []byte) {
	t.Helper()
	s1, s2 := sha256.Sum256([]byte(secret)), sha256.Sum256(file)
	blob := strings.TrimPrefix(source.ContentDigest(file), "git:")
	for _, needle := range []string{secret, hex.EncodeToString(s1[:]), hex.EncodeToString(s2[:]), blob} {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if b, _ := os.ReadFile(p); strings.Contains(string(b), needle) {
				t.Errorf("%s holds %q", p, needle)
			}
			return nil
		})
	}
}

// TestFileDecryptSubstitute: a File cannot both decrypt and substitute
// (it rendered the ciphertext, and wrote it as the secret): the load
// refuses the pair, and says where secret values go.
func TestFileDecryptSubstitute(t *testing.T) {
	h := newHost(t)
	h.write(filepath.Join(h.repo, "db.yaml"), fixture(t, "basic.yaml"))
	h.write(filepath.Join(h.repo, "f.yaml"), manifest+`kind: File
metadata: {name: db}
spec: {path: /etc/db.yaml, source: db.yaml, decrypt: sops, substitute: true}
`)
	_, err := loadSet(t, h.repo)
	want := "f.yaml:4: document 1 (File/db): spec.substitute: a File cannot both decrypt and substitute"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "SOPS-encrypted vars file") {
		t.Fatalf("got %v; want %q, naming vars files", err, want)
	}
}
