// Package vars is per-host substitution: the variables a host has (its
// facts, then those a fleet gives it) and the ${NAME} templates rendered
// from them. It knows nothing of manifests; the loader names fields.
package vars

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	suggester "github.com/cortex-sync/cortex-sync/internal/suggest"
)

// Value is one variable's value and where it came from.
type Value struct {
	Text string
	// Secret marks a value from an encrypted vars file: it is never shown,
	// and what uses it is sensitive.
	Secret bool
	// From says where the value was defined, for `fleet targets --vars`
	// ("host facts", "fleet.yaml rule 2", "vars/web1.yaml").
	From string
	// Locked marks a secret this host cannot read: its file is
	// SOPS-encrypted and the host has no key. The name is defined (SOPS
	// leaves names in the clear); a rendering that uses it fails.
	Locked bool
}

// Redacted is what a secret value shows as.
const Redacted = "(secret)"

// RedactedLocked is what a locked value shows as.
const RedactedLocked = "(secret; no age key on this host)"

// MaxProblems bounds the problems one template reports; the rest are
// counted.
const MaxProblems = 20

// Shown is the value as it may be displayed: a secret's is redacted.
func (v Value) Shown() string {
	if v.Locked {
		return RedactedLocked
	}
	if v.Secret {
		return Redacted
	}
	return v.Text
}

// Set is every variable a host has. The first definition of a name wins
// (Add): callers add the strongest source first.
type Set struct {
	host    string
	values  map[string]Value
	lenient bool
}

// Lenient is s where every name is defined: a name s does not define,
// or a locked one, renders as "". It checks a template's syntax where the host, and so
// its variables, are not known (validating every rule of a fleet).
func (s *Set) Lenient() *Set {
	cp := *s
	cp.lenient = true
	return &cp
}

// NewSet is an empty set for the host named host (named in errors).
func NewSet(host string) *Set { return &Set{host: host, values: map[string]Value{}} }

// Host is the host the set is for.
func (s *Set) Host() string { return s.host }

// Add defines name unless it is already defined; it reports whether it did.
func (s *Set) Add(name string, v Value) bool {
	if _, ok := s.values[name]; ok {
		return false
	}
	s.values[name] = v
	return true
}

// Lookup is the value of name.
func (s *Set) Lookup(name string) (Value, bool) {
	if s == nil {
		return Value{}, false
	}
	v, ok := s.values[name]
	return v, ok || s.lenient
}

// Names are the defined names, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(s.values))
}

// Len is how many variables are defined.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.values)
}

// Used are the variables one rendering used, by name.
type Used map[string]Value

// Secret reports whether a secret value was used.
func (u Used) Secret() bool {
	for _, v := range u {
		if v.Secret {
			return true
		}
	}
	return false
}

// Merge adds the variables of o.
func (u Used) Merge(o Used) {
	for k, v := range o {
		u[k] = v
	}
}

// Digest names a value without showing it: the SHA-256 of name and value.
// A secret's digest must be keyed before it is stored (the caller holds
// the key); a plain digest of a short secret could be guessed.
func Digest(name string, v Value) string {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(v.Text))
	return hex.EncodeToString(h.Sum(nil))
}

// Error is a bad or undefined reference in a template.
type Error struct {
	Line, Column int    // 1-based, in the template
	Name         string // the variable, when one is named
	Host         string
	Msg          string
}

func (e *Error) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// validName reports whether s may name a variable: letters, digits and
// _ . - / (a label key such as app.kubernetes.io/name), starting with a
// letter or _.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '.' || r == '-' || r == '/'):
		default:
			return false
		}
	}
	return true
}

// CheckName says what is wrong with a name a vars file or rule defines, or
// "" when nothing is.
func CheckName(name string) string {
	switch {
	case !validName(name):
		return fmt.Sprintf("%q is not a variable name: use letters, digits and _ . - /, starting with a letter or _", name)
	case name == "host" || strings.HasPrefix(name, "host."):
		return fmt.Sprintf("%q: names under host. are the host's facts and cannot be set", name)
	}
	return ""
}

// Render replaces every ${NAME} in text with its value from s. $${X} is
// a literal ${X}; a $ not followed by { (or a $$ not followed by {) is
// left as it is, so shell scripts pass through. Strict: a name s does
// not define, or a malformed reference (${, ${}, ${a b}), is an *Error at
// its line and column; the first MaxProblems problems of text are
// returned (errors.Join), then one that counts the rest, the rendering
// only when there is none. It runs in time linear in len(text).
func Render(text string, s *Set) (string, Used, error) {
	var b strings.Builder
	b.Grow(len(text))
	used := Used{}
	var errs []error
	var more *Error // the first problem past MaxProblems, where the count starts
	nmore := 0
	line, lineStart := 1, 0
	fail := func(at int, name string, msg func() string) {
		if len(errs) < MaxProblems {
			errs = append(errs, &Error{Line: line, Column: at - lineStart + 1, Name: name, Host: s.Host(), Msg: msg()})
			return
		}
		if nmore++; more == nil {
			more = &Error{Line: line, Column: at - lineStart + 1, Host: s.Host()}
		}
	}
	// stop is the first } or newline at or after where it was last
	// looked for: every ${ before it ends there, so a line of unclosed
	// ${ is searched once, not once for each.
	stop := -1
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '\n':
			b.WriteByte(c)
			i++
			line, lineStart = line+1, i
			continue
		case c != '$':
			b.WriteByte(c)
			i++
			continue
		case strings.HasPrefix(text[i:], "$${"):
			b.WriteString("${") // the escape: a literal ${
			i += 3
			continue
		case !strings.HasPrefix(text[i:], "${"):
			b.WriteByte(c)
			i++
			continue
		}
		if stop < i+2 {
			stop = len(text)
			if k := strings.IndexAny(text[i+2:], "}\n"); k >= 0 {
				stop = i + 2 + k
			}
		}
		if stop == len(text) || text[stop] != '}' {
			fail(i, "", func() string { return "${ is not closed by } on its line; write $${ for a literal ${" })
			b.WriteString("${")
			i += 2
			continue
		}
		name := text[i+2 : stop]
		switch v, ok := s.Lookup(name); {
		case name == "":
			fail(i, "", func() string { return "${} names no variable; write $${} for a literal ${}" })
		case !validName(name):
			fail(i, "", func() string {
				return fmt.Sprintf("${%s} is not a variable reference: a name has letters, digits and _ . - /; write $${ for a literal ${", clip(name))
			})
		case !ok:
			fail(i, name, func() string {
				return fmt.Sprintf("${%s} is not defined for host %q%s", name, s.Host(), suggest(name, s))
			})
		case v.Locked && !s.lenient:
			fail(i, name, func() string {
				return fmt.Sprintf("${%s} is a secret of %s, which is SOPS-encrypted, and host %q has no age key to decrypt it: give --age-key-file (or SOPS_AGE_KEY_FILE)", name, v.From, s.Host())
			})
		case v.Locked:
			used[name] = v // lenient: used, a secret, rendered as ""
		default:
			used[name] = v
			b.WriteString(v.Text)
		}
		i = stop + 1
	}
	if more != nil {
		more.Msg = fmt.Sprintf("and %d more problems from here on (only the first %d are told)", nmore, MaxProblems)
		errs = append(errs, more)
	}
	if len(errs) > 0 {
		return "", nil, joinErrors(errs)
	}
	return b.String(), used, nil
}

// Errors is every problem of one template, in order.
type Errors []error

func (e Errors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

// Unwrap lets errors.As find each *Error.
func (e Errors) Unwrap() []error { return e }

func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return Errors(errs)
}

// Uses reports whether text holds any reference or escape Render would
// act on, without a set: a cheap test before a full rendering.
func Uses(text string) bool { return strings.Contains(text, "${") }

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// suggest names a defined variable close to name, for a typo.
func suggest(name string, s *Set) string {
	best := suggester.Closest(name, s.Names(), false)
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean ${%s}?)", best)
}
