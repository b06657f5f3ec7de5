package supervise

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"syscall"

	"github.com/cortex-sync/cortex-sync/internal/exemem"
	"github.com/cortex-sync/cortex-sync/pkg/sops"
	"golang.org/x/sys/unix"
)

// A process's secretEnv is read by the supervisor each time it starts the
// process, from the host files its spec names (like systemd's
// LoadCredential): the values never sit in the spec file, the status or
// the snapshot. Whatever the process writes goes through a redactor, a
// small process of its own (cortex-sync re-executed, like the supervisor)
// between the process and its log: it replaces every value with
// [redacted:NAME] before the log sees it. It is not the supervisor, so
// the process's output never depends on the supervisor being alive; it
// ends when the last writer of the process's output closes it.

// MaxSecretSize is the largest secret file read, in bytes.
const MaxSecretSize = 64 << 10

// redactArg, after ShimArg, makes cortex-sync a redactor; the process's
// name follows it.
const redactArg = "--redact"

// Secret is one secret value and the variable it is known by.
type Secret struct {
	Name  string
	Value string
}

// wireSecret carries a secret to the redactor, its value as bytes (JSON
// would mangle one that is not UTF-8).
type wireSecret struct {
	Name  string `json:"name"`
	Value []byte `json:"value"`
}

// SecretValue is a secret file's content as the variable's value: one
// trailing newline (echo's) dropped. An empty value or a NUL byte is an
// error: the first cannot be redacted, the second cannot be in an
// environment.
func SecretValue(b []byte) (string, error) {
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	switch {
	case len(b) == 0:
		return "", errors.New("is empty")
	case bytes.IndexByte(b, 0) >= 0:
		return "", errors.New("holds a NUL byte, which an environment variable cannot")
	}
	return string(b), nil
}

// loadSecrets reads a spec's secret files, as it starts the process.
// The driver resolved each path under --root and checked it; here the last
// element is still never followed, so a file swapped for a symlink since
// is refused.
func loadSecrets(spec *Spec) ([]Secret, error) {
	names := make([]string, 0, len(spec.SecretEnv))
	for n := range spec.SecretEnv {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Secret, 0, len(names))
	for _, n := range names {
		v, err := readSecretFile(spec.SecretEnv[n])
		if err != nil {
			return nil, fmt.Errorf("secretEnv %s: %s: %w", n, spec.SecretEnv[n], err)
		}
		out = append(out, Secret{Name: n, Value: v})
	}
	if f := spec.SecretEnvFile; f != nil {
		keys, err := sops.ReadKeys(f.AgeKeyFile)
		if err != nil {
			return nil, fmt.Errorf("secretEnvFile %s: %w", f.Name, err)
		}
		vars, err := sops.DecryptEnv(f.Name, []byte(f.Data), keys)
		if err != nil {
			return nil, fmt.Errorf("secretEnvFile: %w", err)
		}
		for _, v := range vars {
			out = append(out, Secret{Name: v.Name, Value: v.Value})
		}
	}
	return out, nil
}

// SOPSEnv is a SOPS-encrypted dotenv file for a supervisor to decrypt:
// its ciphertext (the plaintext is never written), the name that gives
// its format, and the age identity file to decrypt it with.
type SOPSEnv struct {
	Name       string `json:"name"`
	Data       string `json:"data"`
	AgeKeyFile string `json:"ageKeyFile"`
}

func readSecretFile(p string) (string, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretSize+1))
	if err != nil {
		return "", err
	}
	if len(b) > MaxSecretSize {
		return "", fmt.Errorf("larger than %d bytes", MaxSecretSize)
	}
	return SecretValue(b)
}

// secretEnv is the secrets as environment entries.
func secretEnv(secrets []Secret) []string {
	out := make([]string, 0, len(secrets))
	for _, s := range secrets {
		out = append(out, s.Name+"="+s.Value)
	}
	return out
}

// runRedactor is the redactor's life: secrets from fd 3, output from
// stdin, redacted, to stdout (the log, opened for appending).
func runRedactor() int {
	var wire []wireSecret
	sf := os.NewFile(3, "secrets")
	err := json.NewDecoder(sf).Decode(&wire)
	sf.Close()
	if err != nil {
		// Without the secrets, nothing may pass: the output is dropped.
		io.Copy(io.Discard, os.Stdin)
		return 1
	}
	secrets := make([]Secret, 0, len(wire))
	for _, w := range wire {
		secrets = append(secrets, Secret{Name: w.Name, Value: string(w.Value)})
	}
	r := NewRedactor(secrets)
	exemem.Release() // as the supervisor does (footprint.go); failing, it keeps them mapped
	var pending []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			var out []byte
			out, pending = r.next(append(pending, buf[:n]...), false)
			if len(out) > 0 {
				os.Stdout.Write(out)
			}
		}
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			out, _ := r.next(pending, true)
			os.Stdout.Write(out)
			return 0
		}
	}
}

// Redactor replaces secret values in output with [redacted:NAME].
type Redactor struct {
	secrets []Secret
	fail    [][]int // each secret's KMP failure function
}

// NewRedactor redacts the given secrets; empty values are skipped.
func NewRedactor(secrets []Secret) *Redactor {
	r := &Redactor{}
	for _, s := range secrets {
		if s.Value == "" {
			continue
		}
		r.secrets = append(r.secrets, s)
		r.fail = append(r.fail, failure([]byte(s.Value)))
	}
	return r
}

// Empty reports whether there is nothing to redact.
func (r *Redactor) Empty() bool { return r == nil || len(r.secrets) == 0 }

// Redact replaces every secret in b.
func (r *Redactor) Redact(b []byte) []byte {
	if r.Empty() {
		return b
	}
	out, _ := r.next(b, true)
	return out
}

// String replaces every secret in s.
func (r *Redactor) String(s string) string {
	if r.Empty() {
		return s
	}
	return string(r.Redact([]byte(s)))
}

// next redacts the complete secrets in b and returns what may be written,
// holding back (unless final) the longest end of b that begins a secret:
// it is written once more output shows it is not one. So a secret split
// across two writes is still found, and no part of one is ever written.
func (r *Redactor) next(b []byte, final bool) (out, rest []byte) {
	if r.Empty() {
		return b, nil
	}
	out = make([]byte, 0, len(b))
	i := 0
	for {
		at, which := -1, -1
		for k, s := range r.secrets {
			j := bytes.Index(b[i:], []byte(s.Value))
			if j >= 0 && (at < 0 || j < at || j == at && len(s.Value) > len(r.secrets[which].Value)) {
				at, which = j, k
			}
		}
		if at < 0 {
			break
		}
		out = append(out, b[i:i+at]...)
		out = append(out, "[redacted:"+r.secrets[which].Name+"]"...)
		i += at + len(r.secrets[which].Value)
	}
	tail := b[i:]
	hold := 0
	if !final {
		for k, s := range r.secrets {
			hold = max(hold, prefixAtEnd(tail, []byte(s.Value), r.fail[k]))
		}
	}
	out = append(out, tail[:len(tail)-hold]...)
	return out, append([]byte(nil), tail[len(tail)-hold:]...)
}

// failure is the KMP failure function of p.
func failure(p []byte) []int {
	f := make([]int, len(p))
	for i, k := 1, 0; i < len(p); i++ {
		for k > 0 && p[i] != p[k] {
			k = f[k-1]
		}
		if p[i] == p[k] {
			k++
		}
		f[i] = k
	}
	return f
}

// prefixAtEnd is the length of the longest proper prefix of p that ends b.
func prefixAtEnd(b, p []byte, f []int) int {
	b = b[max(0, len(b)-(len(p)-1)):] // a proper prefix is shorter than p
	k := 0
	for _, c := range b {
		for k > 0 && (k == len(p) || c != p[k]) {
			k = f[k-1]
		}
		if c == p[k] {
			k++
		}
	}
	if k == len(p) {
		k = f[k-1]
	}
	return k
}
