package state

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostKey(t *testing.T) {
	d := At(filepath.Join(t.TempDir(), "state"))
	k1, err := d.HostKey()
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != HostKeySize {
		t.Fatalf("key of %d bytes", len(k1))
	}
	fi, err := os.Stat(d.File(HostKeyFile).Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("host.key mode %04o, want 0600", fi.Mode().Perm())
	}
	k2, err := d.HostKey()
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("second read: %x, %v; want the same key", k2, err)
	}
	if n, _ := d.RemoveTemps(); n != 0 {
		t.Errorf("%d temp files left", n)
	}

	os.Chmod(d.File(HostKeyFile).Path(), 0o644)
	if _, err := d.HostKey(); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a key others can read: %v", err)
	}
	os.Chmod(d.File(HostKeyFile).Path(), 0o600)
	os.WriteFile(d.File(HostKeyFile).Path(), []byte("short"), 0o600)
	if _, err := d.HostKey(); err == nil || !strings.Contains(err.Error(), "holds 5 bytes") {
		t.Errorf("a damaged key: %v", err)
	}
}
