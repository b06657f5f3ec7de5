// Package trust decides who may steer a host: OpenSSH allowed_signers files
// and the SSH signatures (sshsig) checked against them. It follows OpenSSH's
// ssh-keygen -Y verify and -Y find-principals, and is tested against them.
package trust

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Signer is one line of an allowed_signers file (man ssh-keygen, "ALLOWED
// SIGNERS").
type Signer struct {
	File string
	Line int
	// Principals is the pattern list as written ("*@example.com,!bob@example.com").
	Principals string
	// CertAuthority: Key is a CA, and a certificate it signed stands for
	// the principals the certificate names.
	CertAuthority bool
	// Namespaces is a pattern list; empty allows every namespace.
	Namespaces string
	// ValidAfter and ValidBefore bound when a signature may have been
	// made (zero: unbounded).
	ValidAfter, ValidBefore time.Time
	Key                     ssh.PublicKey
}

// AllowedSigners is a parsed allowed_signers file.
type AllowedSigners struct {
	File    string
	Signers []Signer
}

// LoadAllowedSigners reads and parses an allowed_signers file.
func LoadAllowedSigners(path string) (*AllowedSigners, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("allowed signers: %w", err)
	}
	return ParseAllowedSigners(path, data)
}

// ParseAllowedSigners parses an allowed_signers file. Unlike ssh-keygen,
// which reads a file line by line until a line matches, every line must
// parse: a bad line is an error naming file:line, wherever it is.
func ParseAllowedSigners(file string, data []byte) (*AllowedSigners, error) {
	a := &AllowedSigners{File: file}
	for i, raw := range bytes.Split(data, []byte("\n")) {
		line := strings.TrimRight(string(raw), "\r")
		s, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", file, i+1, err)
		}
		if s == nil {
			continue
		}
		s.File, s.Line = file, i+1
		a.Signers = append(a.Signers, *s)
	}
	return a, nil
}

// parseLine parses "principals [options] keytype base64 [comment]"; a blank
// line or a comment is nil.
func parseLine(line string) (*Signer, error) {
	cp := strings.TrimLeft(line, " \t")
	if cp == "" || cp[0] == '#' {
		return nil, nil
	}
	principals, rest, err := principalsField(cp)
	if err != nil {
		return nil, err
	}
	if principals == "" {
		return nil, errors.New("empty principals")
	}
	rest = strings.TrimLeft(rest, " \t")
	if rest == "" {
		return nil, fmt.Errorf("principals %q: no key follows", principals)
	}
	s := &Signer{Principals: principals}
	key, keyErr := parseKey(rest)
	if keyErr != nil && looksLikeKeyType(rest) {
		return nil, keyErr
	}
	if keyErr != nil {
		// Not a key: options, then the key.
		opts, after, err := optionsField(rest)
		if err != nil {
			return nil, err
		}
		after = strings.TrimLeft(after, " \t")
		if after == "" {
			return nil, fmt.Errorf("options %q: no key follows", opts)
		}
		if key, err = parseKey(after); err != nil {
			return nil, err
		}
		if err := s.parseOptions(opts); err != nil {
			return nil, err
		}
	}
	s.Key = key
	return s, nil
}

// principalsField splits off the first field: a quoted string (which may
// hold spaces) or a run of non-blank characters.
func principalsField(s string) (field, rest string, err error) {
	if s[0] == '"' {
		end := strings.IndexByte(s[1:], '"')
		if end < 0 {
			return "", "", errors.New("principals: unterminated quote")
		}
		field, rest = s[1:1+end], s[2+end:]
		if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
			return "", "", errors.New("principals: text right after the closing quote")
		}
		return field, rest, nil
	}
	end := strings.IndexAny(s, " \t")
	if end < 0 {
		return s, "", nil
	}
	return s[:end], s[end:], nil
}

// optionsField splits off the options: up to the first blank outside quotes.
func optionsField(s string) (opts, rest string, err error) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && quoted && i+1 < len(s) && s[i+1] == '"':
			i++
		case c == '"':
			quoted = !quoted
		case (c == ' ' || c == '\t') && !quoted:
			return s[:i], s[i:], nil
		}
	}
	if quoted {
		return "", "", fmt.Errorf("options %q: unterminated quote", s)
	}
	return s, "", nil
}

// looksLikeKeyType tells a key (its type first) from options.
func looksLikeKeyType(s string) bool {
	for _, p := range []string{"ssh-", "ecdsa-", "sk-", "rsa-"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// parseKey reads "keytype base64 [comment]".
func parseKey(s string) (ssh.PublicKey, error) {
	fields := strings.Fields(s)
	if len(fields) < 2 {
		return nil, fmt.Errorf("%q is not a public key (keytype base64)", s)
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil {
		return nil, fmt.Errorf("key %s: bad base64: %v", fields[0], err)
	}
	key, err := ssh.ParsePublicKey(blob)
	if err != nil {
		return nil, fmt.Errorf("key %s: %v", fields[0], err)
	}
	if key.Type() != fields[0] {
		return nil, fmt.Errorf("key says %s but its data is a %s key", fields[0], key.Type())
	}
	return key, nil
}

// parseOptions reads cert-authority, namespaces="…", valid-after="…" and
// valid-before="…", comma-separated; names are case-insensitive, as in
// OpenSSH, and values must be quoted.
func (s *Signer) parseOptions(opts string) error {
	seen := map[string]bool{}
	for opts != "" {
		name, val, hasVal := opts, "", false
		if i := strings.IndexAny(opts, "=,"); i >= 0 && opts[i] == '=' {
			name, hasVal = opts[:i], true
			v, after, err := quoted(opts[i+1:])
			if err != nil {
				return fmt.Errorf("option %s: %v", name, err)
			}
			val, opts = v, after
		} else if i >= 0 {
			name, opts = opts[:i], opts[i:]
		} else {
			opts = ""
		}
		name = strings.ToLower(name)
		if seen[name] {
			return fmt.Errorf("option %s given twice", name)
		}
		seen[name] = true
		switch name {
		case "cert-authority":
			if hasVal {
				return errors.New("option cert-authority takes no value")
			}
			s.CertAuthority = true
		case "namespaces":
			if !hasVal || val == "" {
				return errors.New(`option namespaces needs a value: namespaces="git"`)
			}
			s.Namespaces = val
		case "valid-after", "valid-before":
			if !hasVal {
				return fmt.Errorf(`option %s needs a value: %s="YYYYMMDD[HHMM[SS]][Z]"`, name, name)
			}
			t, err := parseTime(val)
			if err != nil {
				return fmt.Errorf("option %s: %v", name, err)
			}
			if name == "valid-after" {
				s.ValidAfter = t
			} else {
				s.ValidBefore = t
			}
		default:
			return fmt.Errorf("unsupported option %q (supported: cert-authority, namespaces, valid-after, valid-before)", name)
		}
		if opts != "" {
			if opts[0] != ',' || len(opts) == 1 {
				return fmt.Errorf("options: expected a comma before %q", opts)
			}
			opts = opts[1:]
		}
	}
	if !s.ValidAfter.IsZero() && !s.ValidBefore.IsZero() && !s.ValidBefore.After(s.ValidAfter) {
		return errors.New("valid-before is not after valid-after")
	}
	return nil
}

// quoted reads a double-quoted value at the start of s.
func quoted(s string) (val, rest string, err error) {
	if s == "" || s[0] != '"' {
		return "", "", errors.New(`the value must be quoted ("…")`)
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '"':
			b.WriteByte('"')
			i++
		case s[i] == '"':
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(s[i])
		}
	}
	return "", "", errors.New("unterminated quote")
}

// parseTime reads OpenSSH's absolute time: YYYYMMDD, YYYYMMDDHHMM or
// YYYYMMDDHHMMSS, in UTC with a trailing Z, else in local time.
func parseTime(s string) (time.Time, error) {
	loc := time.Local
	v := s
	if strings.HasSuffix(v, "Z") || strings.HasSuffix(v, "z") {
		loc, v = time.UTC, v[:len(v)-1]
	}
	var layout string
	switch len(v) {
	case 8:
		layout = "20060102"
	case 12:
		layout = "200601021504"
	case 14:
		layout = "20060102150405"
	default:
		return time.Time{}, fmt.Errorf("%q is not YYYYMMDD[HHMM[SS]][Z]", s)
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return time.Time{}, fmt.Errorf("%q is not YYYYMMDD[HHMM[SS]][Z]", s)
		}
	}
	t, err := time.ParseInLocation(layout, v, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: %v", s, err)
	}
	return t, nil
}

// MatchPatternList is OpenSSH's match_pattern_list: s against a
// comma-separated list of * and ? patterns, where a matching !pattern
// refuses at once; true when some positive pattern matched and no negated
// one did.
func MatchPatternList(s, list string) bool {
	positive := false
	for _, p := range strings.Split(list, ",") {
		negated := strings.HasPrefix(p, "!")
		if negated {
			p = p[1:]
		}
		if matchPattern(s, p) {
			if negated {
				return false
			}
			positive = true
		}
	}
	return positive
}

// matchPattern is a glob with * (any run) and ? (one byte).
func matchPattern(s, p string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			if p == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if matchPattern(s[i:], p) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
		}
		s, p = s[1:], p[1:]
	}
	return s == ""
}
