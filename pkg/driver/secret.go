package driver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// keyedPrefix starts an ID keyed with the host key: what state.json keeps
// of sensitive content and of secret files. An ID without it was written
// by an older cortex-sync, unkeyed; it is keyed when next recorded.
const keyedPrefix = "hmac-sha256:"

// Keys keys IDs with the state dir's host key, read (or made) once, when
// first needed: a sync without sensitive content or secrets never makes one.
type Keys struct {
	dir  state.Dir
	once sync.Once
	key  []byte
	err  error
}

// NewKeys keys IDs with the host key of a state dir.
func NewKeys(dir state.Dir) *Keys { return &Keys{dir: dir} }

func (k *Keys) load() ([]byte, error) {
	k.once.Do(func() { k.key, k.err = k.dir.HostKey() })
	return k.key, k.err
}

// keys is the env's keys; a bare Env (a test's) reads the key every time.
func (env *Env) keys() *Keys {
	if env.Keys != nil {
		return env.Keys
	}
	return NewKeys(env.State)
}

// keyed turns an unkeyed ID (a content digest, a blob ID, a SHA-256) into
// its keyed form: HMAC-SHA256 of the ID under the host key. Being a
// function of the unkeyed ID alone, it needs no second read of the
// content, and an old record is migrated without one.
func (env *Env) keyed(raw string) (string, error) {
	if raw == "" || isKeyed(raw) {
		return raw, nil
	}
	key, err := env.keys().load()
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(raw))
	return keyedPrefix + hex.EncodeToString(m.Sum(nil)), nil
}

func isKeyed(id string) bool { return strings.HasPrefix(id, keyedPrefix) }

// keyedIf keys raw when sensitive.
func (env *Env) keyedIf(sensitive bool, raw string) (string, error) {
	if !sensitive {
		return raw, nil
	}
	return env.keyed(raw)
}

// likeRecord puts a live SHA-256 in the form the record keeps, keyed or
// not, so the two compare.
func (env *Env) likeRecord(recorded, sum string) (string, error) {
	return env.keyedIf(isKeyed(recorded), sum)
}

// secret is one secretEnv entry read from the host.
type secret struct {
	name  string // the environment variable
	path  string // as the manifest names it
	host  string // where it really is on the host, --root resolved
	value string
}

// secretField names a secretEnv entry in errors.
func secretField(name string) string { return "spec.secretEnv." + name }

// readSecrets reads a spec's secret files under --root, each confined like
// every host path cortex-sync reads: resolved in the root, inside the
// allowed paths, a regular file and not a symlink. Errors name the field
// and the path, never the content.
func readSecrets(env *Env, m map[string]string) ([]secret, error) {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]secret, 0, len(names))
	for _, n := range names {
		s, err := readSecret(env, n, m[n])
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func readSecret(env *Env, name, p string) (secret, error) {
	s := secret{name: name, path: p}
	fail := func(format string, args ...any) (secret, error) {
		where := ""
		if env.Root.Dir() != "/" {
			where = " (under --root " + env.Root.Dir() + ")"
		}
		return s, fmt.Errorf("%s: %s%s: %s", secretField(name), p, where, fmt.Sprintf(format, args...))
	}
	d, err := env.Root.OpenDir(path.Dir(path.Clean(p)))
	if missing(err) {
		return fail("does not exist")
	}
	if err != nil {
		return fail("%v", errors.Unwrap(err))
	}
	defer d.Close()
	base := path.Base(p)
	inRoot := path.Join(d.Path(), base)
	if !env.Root.AllowedWrite(inRoot) {
		return fail("resolves to %s, outside the allowed paths; add --allowed-path or move it", inRoot)
	}
	f, err := d.Open(base)
	switch {
	case missing(err):
		return fail("does not exist")
	case errors.Is(err, unix.ELOOP):
		return fail("is a symlink; name the file it points to")
	case err != nil:
		return fail("cannot be read: %v", errors.Unwrap(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fail("cannot be read: %v", err)
	}
	if !fi.Mode().IsRegular() {
		return fail("is not a regular file")
	}
	if fi.Size() > supervise.MaxSecretSize {
		return fail("is larger than %d bytes", supervise.MaxSecretSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, supervise.MaxSecretSize+1))
	if err != nil {
		return fail("cannot be read: %v", err)
	}
	if s.value, err = supervise.SecretValue(b); err != nil {
		return fail("%v", err)
	}
	s.host = filepath.Join(env.Root.Dir(), inRoot)
	return s, nil
}

// secretsDigest names the content of a spec's secret files, keyed, so a
// change of one restarts (or re-runs) what uses it while the record holds
// nothing a secret could be guessed from.
//
// A sandbox standing for a host (diff --against) has no secrets: there
// the files are named by their paths alone, on both sides of its plan.
func secretsDigest(env *Env, m map[string]string) (string, error) {
	if len(m) == 0 || env.Simulate {
		return "", nil
	}
	secrets, err := readSecrets(env, m)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range secrets {
		sum := sha256.Sum256([]byte(s.value))
		k, err := env.keyed(hex.EncodeToString(sum[:]))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\nsecretEnv.%s=%s", s.name, k)
	}
	return b.String(), nil
}

// redactor replaces the values of a spec's secrets in output.
func redactor(secrets []secret) *supervise.Redactor {
	pairs := make([]supervise.Secret, 0, len(secrets))
	for _, s := range secrets {
		if s.value == "" {
			continue // nothing to redact
		}
		pairs = append(pairs, supervise.Secret{Name: s.name, Value: s.value})
	}
	return supervise.NewRedactor(pairs)
}
