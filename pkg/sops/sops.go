// Package sops decrypts files in the SOPS format (YAML, JSON, dotenv and
// binary) with a host's age identities. It is a decoder of the documented
// format, not the sops library, which would bring every cloud KMS SDK.
package sops

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// MaxSize bounds a SOPS file: a larger one is refused before it is read
// whole, so a repository cannot make the agent hold more than this (and
// its plaintext, which is smaller) per file.
const MaxSize = 16 << 20

// ErrMACMismatch: the values do not match the file's MAC; the file was
// changed by something other than sops.
var ErrMACMismatch = errors.New("MAC mismatch: the file was changed outside sops (tampered, or edited by hand); re-create it with sops")

// ErrTooLarge: the file is over MaxSize.
var ErrTooLarge = fmt.Errorf("larger than the %d MiB limit for SOPS files", MaxSize>>20)

// NotForThisHostError: none of the host's keys is a recipient of the file.
type NotForThisHostError struct {
	Recipients []string // the file's age recipients
	Others     []string // kinds of other master keys (kms, pgp, ...)
	Host       []string // the host's public keys
	KeyFile    string
}

func (e *NotForThisHostError) Error() string {
	var to []string
	if len(e.Recipients) > 0 {
		to = append(to, "age "+strings.Join(e.Recipients, ", "))
	}
	for _, o := range e.Others {
		to = append(to, o+" keys")
	}
	if len(to) == 0 {
		to = append(to, "no age recipient")
	}
	if len(e.Host) == 0 && e.KeyFile == "" {
		return fmt.Sprintf("encrypted for %s; this host has no age key: give --age-key-file (or SOPS_AGE_KEY_FILE)", strings.Join(to, "; "))
	}
	host := fmt.Sprintf("this host's keys (%s) are not X25519 age keys", e.KeyFile)
	if len(e.Host) > 0 {
		host = fmt.Sprintf("this host's key (%s) is %s", e.KeyFile, strings.Join(e.Host, ", "))
	}
	return fmt.Sprintf("encrypted for %s; %s: add it to the file's recipients (.sops.yaml creation_rules, then sops updatekeys)", strings.Join(to, "; "), host)
}

// Format is how a SOPS file is stored.
type Format int

const (
	Binary Format = iota
	YAML
	JSON
	Dotenv
	INI
)

func (f Format) String() string {
	return [...]string{"binary", "yaml", "json", "dotenv", "ini"}[f]
}

// FormatOf is the format sops gives a file by its name's extension.
func FormatOf(name string) Format {
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml":
		return YAML
	case ".json":
		return JSON
	case ".env":
		return Dotenv
	case ".ini":
		return INI
	}
	return Binary
}

var (
	yamlMark   = regexp.MustCompile(`(?m)^sops:[ \t]*\r?\n(?:[ \t]+.*\r?\n|[ \t]*#.*\r?\n)*?[ \t]+mac:[ \t]*["']?ENC\[AES256_GCM,`)
	jsonMark   = regexp.MustCompile(`"mac":[ \t\r\n]*"ENC\[AES256_GCM,`)
	dotenvMark = regexp.MustCompile(`(?m)^sops_mac=ENC\[AES256_GCM,`)
)

// IsEncrypted tells cheaply whether data looks like a SOPS file of the
// format its name gives: its metadata carries an encrypted MAC. It does
// not say the file is well formed; Decrypt does.
func IsEncrypted(name string, data []byte) bool {
	if len(data) > MaxSize {
		return false
	}
	switch FormatOf(name) {
	case YAML:
		return yamlMark.Match(data)
	case Dotenv:
		return dotenvMark.Match(data)
	case JSON, Binary:
		return bytes.Contains(data, []byte(`"sops"`)) && jsonMark.Match(data)
	}
	return false
}

// Decrypt decrypts a SOPS file with the host's keys: the format comes
// from name's extension, as sops gives it, and the output is what
// `sops --decrypt` writes. The MAC is checked. Errors name the file,
// never a value.
func Decrypt(name string, data []byte, keys *Keys) ([]byte, error) {
	out, err := decrypt(name, data, keys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

func decrypt(name string, data []byte, keys *Keys) ([]byte, error) {
	if len(data) > MaxSize {
		return nil, ErrTooLarge
	}
	f := FormatOf(name)
	var (
		doc *document
		err error
	)
	switch f {
	case YAML:
		doc, err = loadYAML(data)
	case JSON, Binary:
		doc, err = loadJSON(data)
	case Dotenv:
		doc, err = loadDotenv(data)
	default:
		return nil, fmt.Errorf("SOPS %s files are not supported (YAML, JSON, dotenv and binary are)", f)
	}
	if err != nil {
		return nil, fmt.Errorf("not a SOPS %s file: %w", f, err)
	}
	key, err := doc.meta.dataKey(keys)
	if err != nil {
		return nil, err
	}
	if err := doc.decrypt(key); err != nil {
		return nil, err
	}
	switch f {
	case YAML:
		return emitYAML(doc.branches)
	case JSON:
		return emitJSON(doc.branches[0])
	case Dotenv:
		return emitDotenv(doc.branches[0])
	}
	for _, it := range doc.branches[0] {
		if it.key == "data" {
			if s, ok := it.value.(string); ok {
				return []byte(s), nil
			}
			return nil, errors.New("not a SOPS binary file: its data is not a string")
		}
	}
	return nil, errors.New("not a SOPS binary file: no data key")
}

// comment is a comment line of a YAML or dotenv file, without its '#'.
type comment struct {
	text   string
	inline bool
}

// item is one entry of a mapping: key is a string or a comment (then
// value is nil).
type item struct {
	key   any
	value any
}

// branch is a mapping in file order. Values are string, int, float64,
// bool, time.Time, nil, []any (with comment items), or branch.
type branch []item

type document struct {
	branches []branch
	meta     *metadata
}

// decrypt decrypts every value the metadata's rules say is encrypted,
// in place, and checks the MAC over the plaintext as sops computes it.
func (doc *document) decrypt(key []byte) error {
	block, err := aes.NewCipher(key)
	if err != nil {
		return fmt.Errorf("data key: %w", err)
	}
	w := &walker{meta: doc.meta, block: block, hash: sha512.New()}
	if doc.meta.macOnlyEncrypted {
		w.hash.Write(macOnlyEncryptedInit)
	}
	for _, b := range doc.branches {
		if err := w.branch(b, nil, nil); err != nil {
			return err
		}
	}
	want, err := w.open(doc.meta.mac, doc.meta.lastModified.Format(time.RFC3339))
	if err != nil {
		return fmt.Errorf("the MAC cannot be decrypted: %w", ErrMACMismatch)
	}
	got := fmt.Sprintf("%X", w.hash.Sum(nil))
	if s, ok := want.(string); !ok || s != got {
		return ErrMACMismatch
	}
	return nil
}

// macOnlyEncryptedInit starts the MAC of a file with mac_only_encrypted:
// SHA-256("sops"), as sops defines it.
var macOnlyEncryptedInit = []byte{0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0xb, 0xb, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69}

type walker struct {
	meta  *metadata
	block cipher.Block
	hash  hash.Hash
	gcms  map[int]cipher.AEAD
}

// stack holds, per level of nesting, the comments seen since the last
// value: what the comment regexes look at.
type stack [][]string

func (w *walker) branch(b branch, p []string, cs stack) error {
	cs = append(cs[:len(cs):len(cs)], nil)
	top := len(cs) - 1
	for i := range b {
		it := &b[i]
		if c, ok := it.key.(comment); ok {
			cs[top] = append(cs[top], c.text)
			v, err := w.leaf(c, p, cs)
			if err != nil {
				return err
			}
			switch v := v.(type) {
			case comment:
				it.key = v
			case string:
				it.key = comment{text: v, inline: c.inline}
			}
			continue
		}
		c, vIsComment := it.value.(comment)
		if vIsComment {
			cs[top] = append(cs[top], c.text)
		}
		k, ok := it.key.(string)
		if !ok {
			return fmt.Errorf("a key is not a string (%T); SOPS files have string keys only", it.key)
		}
		v, err := w.value(it.value, append(p[:len(p):len(p)], k), cs)
		if err != nil {
			return err
		}
		it.value = v
		if !vIsComment {
			cs[top] = nil
		}
	}
	return nil
}

func (w *walker) list(l []any, p []string, cs stack) error {
	cs = append(cs[:len(cs):len(cs)], nil)
	top := len(cs) - 1
	for i, v := range l {
		c, isComment := v.(comment)
		if isComment {
			cs[top] = append(cs[top], c.text)
		}
		nv, err := w.value(v, p, cs)
		if err != nil {
			return err
		}
		l[i] = nv
		if !isComment {
			cs[top] = nil
		}
	}
	return nil
}

func (w *walker) value(v any, p []string, cs stack) (any, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case branch:
		return v, w.branch(v, p, cs)
	case []any:
		return v, w.list(v, p, cs)
	case string, int, bool, float64, time.Time, comment:
		return w.leaf(v, p, cs)
	}
	return nil, fmt.Errorf("value of an unsupported type %T at %s", v, strings.Join(p, "."))
}

func (w *walker) leaf(in any, p []string, cs stack) (any, error) {
	c, isComment := in.(comment)
	encrypted := w.meta.encrypted(p, cs, isComment)
	v := in
	if encrypted {
		aad := strings.Join(p, ":") + ":"
		switch {
		case isComment:
			d, err := w.open(c.text, aad)
			if err == nil {
				v = d
			} // else a comment an older sops left in the clear
		default:
			s, ok := in.(string)
			if !ok {
				return nil, fmt.Errorf("%s: a value that should be encrypted is not (%T)", strings.Join(p, "."), in)
			}
			d, err := w.open(s, aad)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", strings.Join(p, "."), err)
			}
			v = d
		}
	}
	if !w.meta.macOnlyEncrypted || encrypted {
		if _, ok := v.(comment); !ok {
			b, err := macBytes(v)
			if err != nil {
				return nil, err
			}
			w.hash.Write(b)
		}
	}
	return v, nil
}

// macBytes is a value as the MAC sees it.
func macBytes(v any) ([]byte, error) {
	switch v := v.(type) {
	case string:
		return []byte(v), nil
	case int:
		return []byte(strconv.Itoa(v)), nil
	case float64:
		return []byte(strconv.FormatFloat(v, 'f', -1, 64)), nil
	case bool:
		if v {
			return []byte("True"), nil
		}
		return []byte("False"), nil
	case []byte:
		return v, nil
	case time.Time:
		return v.MarshalText()
	case comment:
		return []byte(v.text), nil
	}
	return nil, fmt.Errorf("a value of type %T", v)
}

// parseValue splits ENC[AES256_GCM,data:…,iv:…,tag:…,type:…] (by hand: a
// regular expression with submatches is slow on a value of megabytes).
func parseValue(s string) (data, iv, tag, typ string, ok bool) {
	const pre = "ENC[AES256_GCM,data:"
	end := strings.LastIndexByte(s, ']')
	if !strings.HasPrefix(s, pre) || end < 0 {
		return "", "", "", "", false
	}
	rest := s[len(pre):end]
	cut := func(sep string) (string, bool) {
		i := strings.LastIndex(rest, sep)
		if i < 0 {
			return "", false
		}
		v := rest[i+len(sep):]
		rest = rest[:i]
		return v, v != ""
	}
	typ, ok1 := cut(",type:")
	tag, ok2 := cut(",tag:")
	iv, ok3 := cut(",iv:")
	return rest, iv, tag, typ, ok1 && ok2 && ok3 && rest != ""
}

// errValue: an encrypted value that is not well formed or does not
// authenticate; never quoted.
var errValue = errors.New("an encrypted value cannot be decrypted with the data key (tampered, or not sops' format)")

// open decrypts one ENC[AES256_GCM,...] value; aad binds it to its path.
func (w *walker) open(s, aad string) (any, error) {
	if s == "" {
		return "", nil
	}
	d64, iv64, tag64, typ, ok := parseValue(s)
	if !ok {
		return nil, errValue
	}
	data, err1 := base64.StdEncoding.DecodeString(d64)
	iv, err2 := base64.StdEncoding.DecodeString(iv64)
	tag, err3 := base64.StdEncoding.DecodeString(tag64)
	if err1 != nil || err2 != nil || err3 != nil || len(iv) == 0 || len(tag) != 16 {
		return nil, errValue
	}
	g, ok := w.gcms[len(iv)]
	if !ok {
		if g, err1 = cipher.NewGCMWithNonceSize(w.block, len(iv)); err1 != nil {
			return nil, errValue
		}
		if w.gcms == nil {
			w.gcms = map[int]cipher.AEAD{}
		}
		w.gcms[len(iv)] = g
	}
	plain, err := g.Open(data[:0], iv, append(data, tag...), []byte(aad))
	if err != nil {
		return nil, errValue
	}
	switch t := typ; t {
	case "str", "bytes":
		return string(plain), nil
	case "int":
		return typed(strconv.Atoi(string(plain)))
	case "float":
		return typed(strconv.ParseFloat(string(plain), 64))
	case "bool":
		return typed(strconv.ParseBool(string(plain)))
	case "time":
		var tm time.Time
		if err := tm.UnmarshalText(plain); err != nil {
			return nil, fmt.Errorf("an encrypted time is not a time")
		}
		return tm, nil
	case "comment":
		return comment{text: string(plain)}, nil
	default:
		return nil, fmt.Errorf("an encrypted value of unknown type %q", t)
	}
}

func typed[T any](v T, err error) (any, error) {
	if err != nil {
		return nil, fmt.Errorf("an encrypted value is not of its stated type")
	}
	return v, nil
}
