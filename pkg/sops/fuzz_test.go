package sops

import (
	"path/filepath"
	"testing"
)

// FuzzDecrypt: whatever the bytes, Decrypt returns an error or a
// plaintext, never panics; IsEncrypted agrees with nothing in particular
// but must not panic either.
func FuzzDecrypt(f *testing.F) {
	names := []string{"basic.yaml", "regex.yaml", "multidoc.yaml", "basic.json", "app.env", "secret.bin", "tampered-value.yaml", "shamir.yaml"}
	for i, n := range names {
		f.Add(uint8(i), fixture(f, n))
	}
	k := keys(f, "host.agekey")
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		name := names[int(which)%len(names)]
		IsEncrypted(name, data)
		out, err := Decrypt(name, data, k)
		if err == nil && out == nil && filepath.Ext(name) != ".bin" {
			t.Fatalf("%s: no error and no output", name)
		}
	})
}
