package vars

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Facts are what a host knows of itself, offered as host.* variables.
type Facts struct {
	Name      string            // --host-name: ${host.name}
	Labels    map[string]string // --label: ${host.labels.KEY}
	MachineID string            // /etc/machine-id under --root: ${host.machineID}; "" leaves it undefined
	Hostname  string            // the kernel's hostname: ${host.hostname}; "" leaves it undefined
}

// FactNames are the host facts beyond host.name and host.labels.KEY.
var FactNames = []string{"host.machineID", "host.hostname", "host.os", "host.arch"}

// AddFacts adds the host facts to s, before any other variable: a fact
// cannot be overridden.
func AddFacts(s *Set, f Facts) {
	const from = "host facts"
	add := func(name, v string) {
		if v != "" {
			s.Add(name, Value{Text: v, From: from})
		}
	}
	add("host.name", f.Name)
	for k, v := range f.Labels {
		s.Add("host.labels."+k, Value{Text: v, From: from}) // an empty label is still a label
	}
	add("host.machineID", f.MachineID)
	add("host.hostname", f.Hostname)
	add("host.os", runtime.GOOS)
	add("host.arch", runtime.GOARCH)
}

// Hostname is the kernel's hostname, or "" when it cannot be read.
func Hostname() string {
	h, _ := os.Hostname()
	return h
}

// Decrypt turns a SOPS-encrypted vars file into its plaintext; the
// integrator wires it to pkg/sops. name is the file's path in the
// repository, for errors.
type Decrypt func(name string, data []byte) ([]byte, error)

// ErrNoDecrypt is wrapped when an encrypted vars file is met and no
// Decrypt is configured.
var ErrNoDecrypt = errors.New("no SOPS key is configured on this host")

// FileError is a problem in a vars file, at its line (0: the whole file).
type FileError struct {
	File string
	Line int
	Msg  string
	Err  error
}

func (e *FileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

func (e *FileError) Unwrap() error { return e.Err }

// IsSOPS reports whether data is a SOPS-encrypted YAML (or JSON) file:
// a mapping with a top-level sops key.
func IsSOPS(data []byte) bool {
	var n yaml.Node
	if yaml.Unmarshal(data, &n) != nil || len(n.Content) == 0 {
		return false
	}
	m := n.Content[0]
	for i := 0; m.Kind == yaml.MappingNode && i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "sops" {
			return true
		}
	}
	return false
}

// ParseFile reads a vars file: a flat YAML (or JSON) mapping of names to
// scalar values. One with a top-level sops key is decrypted first (its
// values are secret; secret reports it); without decrypt it is refused
// (ParseLocked reads its names). Problems name the file and line.
func ParseFile(name string, data []byte, decrypt Decrypt) (values map[string]string, lines map[string]int, secret bool, err error) {
	if IsSOPS(data) {
		if decrypt == nil {
			return nil, nil, false, &FileError{File: name, Msg: "is SOPS-encrypted, and " + ErrNoDecrypt.Error() + " (--age-key-file)", Err: ErrNoDecrypt}
		}
		plain, err := decrypt(name, data)
		if err != nil {
			return nil, nil, false, &FileError{File: name, Msg: "decrypt: " + err.Error(), Err: err}
		}
		data, secret = plain, true
	}
	values, lines, err = parseFlat(name, data, secret)
	return values, lines, secret, err
}

// ParseLocked reads the names of a SOPS-encrypted vars file without its
// key: SOPS encrypts values, not names. Its problems are those ParseFile
// reports of the plaintext's shape, at their lines, quoting no value.
func ParseLocked(name string, data []byte) (lines map[string]int, err error) {
	_, lines, err = parseFlat(name, data, true)
	return lines, err
}

// parseFlat decodes a flat mapping of scalars. In a secret file, no error
// quotes a value.
func parseFlat(name string, data []byte, secret bool) (map[string]string, map[string]int, error) {
	var docs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), "yaml: ")
			if secret {
				msg = "the decrypted file is not YAML"
			}
			return nil, nil, &FileError{File: name, Msg: msg}
		}
		if len(n.Content) > 0 && n.Content[0].Tag != "!!null" {
			docs = append(docs, n.Content[0])
		}
	}
	values, lines := map[string]string{}, map[string]int{}
	switch {
	case len(docs) == 0:
		return values, lines, nil // an empty file defines nothing
	case len(docs) > 1:
		return nil, nil, &FileError{File: name, Line: docs[1].Line, Msg: "a vars file is one mapping; this is a second document"}
	case docs[0].Kind != yaml.MappingNode:
		return nil, nil, &FileError{File: name, Line: docs[0].Line, Msg: "a vars file is a mapping of names to values, e.g. db.host: 10.0.0.5"}
	}
	m := docs[0]
	var errs []error
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			errs = append(errs, &FileError{File: name, Line: k.Line, Msg: "a name must be a plain string"})
			continue
		}
		if secret && k.Value == "sops" {
			continue // metadata a decrypter may leave in place
		}
		if msg := CheckName(k.Value); msg != "" {
			errs = append(errs, &FileError{File: name, Line: k.Line, Msg: msg})
			continue
		}
		if _, dup := values[k.Value]; dup {
			errs = append(errs, &FileError{File: name, Line: k.Line, Msg: fmt.Sprintf("%q is defined twice (first at line %d)", k.Value, lines[k.Value])})
			continue
		}
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			errs = append(errs, &FileError{File: name, Line: v.Line, Msg: fmt.Sprintf("%q must have a string value (nested maps, lists and null are not variables)", k.Value)})
			continue
		}
		values[k.Value], lines[k.Value] = v.Value, k.Line
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b error) int { return a.(*FileError).Line - b.(*FileError).Line })
		if n := len(errs) - MaxProblems; n > 0 {
			errs = append(errs[:MaxProblems], &FileError{File: name, Line: errs[MaxProblems].(*FileError).Line, Msg: fmt.Sprintf("and %d more problems from here on (only the first %d are told)", n, MaxProblems)})
		}
		return nil, nil, errors.Join(errs...)
	}
	return values, lines, nil
}
