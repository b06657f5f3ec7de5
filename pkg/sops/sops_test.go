package sops

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// keys parses a fixture's age identities (ReadKeys would refuse the file:
// Git keeps it 0644).
func keys(t testing.TB, name string) *Keys {
	t.Helper()
	k, err := ParseKeys(filepath.Join("testdata", name), fixture(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecryptLikeTheLibrary: every fixture the sops library made
// (internal/sopsgen) decrypts to exactly what the library decrypted it to.
func TestDecryptLikeTheLibrary(t *testing.T) {
	plains, err := filepath.Glob("testdata/*.plain")
	if err != nil || len(plains) < 10 {
		t.Fatalf("fixtures: %v (%d); run make sops-fixtures", err, len(plains))
	}
	k := keys(t, "host.agekey")
	for _, p := range plains {
		name := strings.TrimSuffix(filepath.Base(p), ".plain")
		t.Run(name, func(t *testing.T) {
			got, err := Decrypt(name, fixture(t, name), k)
			if err != nil {
				t.Fatal(err)
			}
			if want := fixture(t, name+".plain"); !bytes.Equal(got, want) {
				t.Errorf("got\n%q\nwant (the library's)\n%q", got, want)
			}
			if !IsEncrypted(name, fixture(t, name)) {
				t.Error("IsEncrypted: false")
			}
			if IsEncrypted(name, fixture(t, name+".plain")) {
				t.Error("IsEncrypted of the plaintext: true")
			}
		})
	}
}

// TestRotationSamePlaintext: a file encrypted again with another data key
// decrypts to the same bytes.
func TestRotationSamePlaintext(t *testing.T) {
	k := keys(t, "host.agekey")
	for _, pair := range [][2]string{{"basic.yaml", "rotated.yaml"}, {"secret.bin", "rotated.bin"}} {
		a, b := fixture(t, pair[0]), fixture(t, pair[1])
		if bytes.Equal(a, b) {
			t.Fatalf("%s and %s are the same ciphertext", pair[0], pair[1])
		}
		pa, err := Decrypt(pair[0], a, k)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := Decrypt(pair[1], b, k)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(pa, pb) {
			t.Errorf("%s and %s decrypt differently", pair[0], pair[1])
		}
	}
}

func TestRefused(t *testing.T) {
	host, other := keys(t, "host.agekey"), keys(t, "other.agekey")
	for _, c := range []struct {
		name string
		keys *Keys
		want []string
		is   error
	}{
		{"tampered-unencrypted.yaml", host, []string{"tampered-unencrypted.yaml", "MAC mismatch"}, ErrMACMismatch},
		{"tampered-removed.yaml", host, []string{"MAC mismatch"}, ErrMACMismatch},
		{"tampered-unencrypted.env", host, []string{"MAC mismatch"}, ErrMACMismatch},
		{"tampered-unencrypted.json", host, []string{"MAC mismatch"}, ErrMACMismatch},
		{"tampered-value.yaml", host, []string{"database.password", "cannot be decrypted"}, errValue},
		{"other.yaml", host, []string{"other.yaml", "encrypted for age " + other.Recipients()[0], "this host's key (testdata/host.agekey) is " + host.Recipients()[0]}, nil},
		{"other.env", host, []string{"encrypted for age " + other.Recipients()[0], host.Recipients()[0]}, nil},
		{"basic.yaml", other, []string{"encrypted for age " + host.Recipients()[0], other.Recipients()[0]}, nil},
		{"basic.yaml", nil, []string{"this host has no age key"}, nil},
		{"shamir.yaml", host, []string{"split across 2 key groups", "shamir_threshold 2", "not supported"}, nil},
		{"basic.yaml.plain", host, []string{"basic.yaml.plain: not a SOPS binary file"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := fixture(t, c.name)
			name := c.name
			if strings.HasSuffix(name, ".plain") {
				name = "testdata/" + name
			}
			_, err := Decrypt(name, data, c.keys)
			if err == nil {
				t.Fatal("decrypted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v is not %v", err, c.is)
			}
			var nf *NotForThisHostError
			if strings.HasPrefix(c.name, "other") && !errors.As(err, &nf) {
				t.Errorf("error %v is not a NotForThisHostError", err)
			}
			// never a value of the file in the message
			for _, secret := range []string{"s3cr3t", "tok-123456", "hunter2"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows a secret", err)
				}
			}
		})
	}
}

func TestRefusedBadInput(t *testing.T) {
	k := keys(t, "host.agekey")
	basic := fixture(t, "basic.yaml")
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"big.yaml", append(bytes.Repeat([]byte("#"), MaxSize), '\n'), "big.yaml: larger than the 16 MiB limit"},
		{"x.yaml", []byte("a: [\n"), "x.yaml: not a SOPS yaml file"},
		{"x.yaml", []byte("a: 1\n"), "x.yaml: not a SOPS yaml file: no sops metadata"},
		{"x.json", []byte(`["a"]`), "x.json: not a SOPS json file: the top level is not an object"},
		{"x.env", []byte("A=1\nnot a pair\n"), "x.env: not a SOPS dotenv file: line 2 is not KEY=value"},
		{"x.ini", []byte("[a]\n"), "x.ini: SOPS ini files are not supported"},
		{"x.yaml", []byte("a: 1\nb: 2\na: 3\n"), `x.yaml: not a SOPS yaml file: line 3: mapping key "a" already defined at line 1`},
		{"x.yaml", []byte("a:\n  b: 1\n  b: 2\n"), `line 3: mapping key "b" already defined at line 2`},
		{"x.yaml", []byte("a: 1\n---\nb: 1\nb: 2\n"), `line 4: mapping key "b" already defined at line 3`},
		{"x.yaml", []byte("a: &x [*x]\n"), `anchor "x" contains itself`},
		{"x.yaml", laughs(), "excessive aliasing"},
		{"x.yaml", bytes.Replace(basic, []byte("lastmodified: "), []byte("lastmodified: x"), 1), "not an RFC 3339 time"},
		{"x.yaml", bytes.Replace(basic, []byte("    mac: "), []byte("    nomac: "), 1), "sops.mac is missing"},
		{"x.yaml", bytes.Replace(basic, []byte("    unencrypted_suffix: _unencrypted"), []byte("    unencrypted_suffix: _unencrypted\n    encrypted_regex: x"), 1), "more than one of"},
	} {
		t.Run(c.name+" "+c.want, func(t *testing.T) {
			_, err := Decrypt(c.name, c.data, k)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

// laughs is a small YAML document whose aliases expand to 10^9 values.
func laughs() []byte {
	var b bytes.Buffer
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	return b.Bytes()
}

// TestYAMLManyKeys: reading a YAML mapping is linear in its keys. yaml.v3's
// own duplicate-key check (run when decoding into a map) compares every key
// with every other: 100,000 keys took about 20 s.
func TestYAMLManyKeys(t *testing.T) {
	var b bytes.Buffer
	for i := range 100_000 {
		fmt.Fprintf(&b, "k%06d: v\n", i)
	}
	start := time.Now()
	_, err := Decrypt("many.yaml", b.Bytes(), keys(t, "host.agekey"))
	if err == nil || !strings.Contains(err.Error(), "no sops metadata") {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("100,000 keys read in %v", d)
	}
}

// TestReadKeysMode: an age key file that group or others may read or
// write is refused, as ssh refuses a private key; 0600 and 0400 are read.
func TestReadKeysMode(t *testing.T) {
	key := fixture(t, "host.agekey")
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o600, 0o400} {
		t.Run(mode.String(), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "host.agekey")
			if err := os.WriteFile(file, key, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(file, mode); err != nil {
				t.Fatal(err)
			}
			k, err := ReadKeys(file)
			if mode&0o077 == 0 {
				if err != nil || len(k.Recipients()) != 1 {
					t.Fatalf("got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("read")
			}
			for _, w := range []string{file, fmt.Sprintf("mode %04o", mode), "chmod 600 " + file} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	dir := t.TempDir()
	if _, err := ReadKeys(dir); err == nil || !strings.Contains(err.Error(), dir+" is not a regular file") {
		t.Fatalf("a directory: got %v", err)
	}
}

func TestParseKeys(t *testing.T) {
	_, err := ParseKeys("k.txt", []byte("AGE-SECRET-KEY-1NOTAKEY-secretish\n"))
	if err == nil || !strings.Contains(err.Error(), "k.txt: not an age identity file") || strings.Contains(err.Error(), "secretish") {
		t.Fatalf("got %v", err)
	}
	if _, err := ReadKeys("testdata/none.agekey"); err == nil || !strings.Contains(err.Error(), "none.agekey") {
		t.Fatalf("got %v", err)
	}
	k := keys(t, "host.agekey")
	if r := k.Recipients(); len(r) != 1 || !strings.HasPrefix(r[0], "age1") || !strings.Contains(string(fixture(t, "host.agekey")), r[0]) {
		t.Fatalf("recipients %v", r)
	}
}

func BenchmarkDecrypt(b *testing.B) {
	k := keys(b, "host.agekey")
	// big.*: 1 MiB of plaintext; many.yaml: 20,000 small values (it was
	// quadratic: 2.9 s a decryption)
	for _, name := range []string{"big.bin", "big.yaml", "many.yaml"} {
		data := fixture(b, name)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			if name == "many.yaml" {
				b.SetBytes(int64(len(fixture(b, name+".plain"))))
			} else {
				b.SetBytes(1 << 20)
			}
			for b.Loop() {
				if _, err := Decrypt(name, data, k); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestDecryptEnv(t *testing.T) {
	vars, err := DecryptEnv("app.env", fixture(t, "app.env"), keys(t, "host.agekey"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range vars {
		got[v.Name] = v.Value
	}
	want := map[string]string{"DATABASE_URL": "postgres://app:pa55@db/app", "API_TOKEN": "tok-123456", "MULTI": "line1\nline2", "EMPTY": "", "PLAIN_unencrypted": "visible"}
	if len(got) != len(want) {
		t.Fatalf("got %d variables, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	if _, err := DecryptEnv("basic.yaml", fixture(t, "basic.yaml"), keys(t, "host.agekey")); err == nil || !strings.Contains(err.Error(), "basic.yaml: a SOPS yaml file, not dotenv") {
		t.Fatalf("got %v", err)
	}
}

// TestDecryptEnvTwice: a variable given twice is refused, naming it and
// its lines, never a value (the sops library keeps both).
func TestDecryptEnvTwice(t *testing.T) {
	_, err := DecryptEnv("dup.env", fixture(t, "dup.env"), keys(t, "host.agekey"))
	if err == nil || !strings.Contains(err.Error(), "dup.env: variable \"TOKEN\" is given on lines 1 and 3; give it once") {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(err.Error(), "dup-value") {
		t.Fatalf("error %q shows a value", err)
	}
}
