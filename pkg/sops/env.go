package sops

import (
	"bytes"
	"fmt"
	"strings"
)

// Var is one variable of a dotenv file.
type Var struct {
	Name, Value string
}

// ParseEnv reads a decrypted dotenv file as sops writes one: KEY=value
// lines, "\n" in a value for a newline, # comments. A KEY given twice is
// refused (sops keeps both; which would a program get?). Errors name keys
// and lines, never values.
func ParseEnv(plain []byte) ([]Var, error) {
	var out []Var
	lines := map[string]int{}
	for n, line := range bytes.Split(plain, []byte("\n")) {
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		k, v, ok := bytes.Cut(line, []byte("="))
		if !ok {
			return nil, fmt.Errorf("line %d is not KEY=value", n+1)
		}
		if first, dup := lines[string(k)]; dup {
			return nil, fmt.Errorf("variable %q is given on lines %d and %d; give it once", k, first, n+1)
		}
		lines[string(k)] = n + 1
		out = append(out, Var{Name: string(k), Value: strings.ReplaceAll(string(v), `\n`, "\n")})
	}
	return out, nil
}

// DecryptEnv decrypts a SOPS dotenv file to its variables.
func DecryptEnv(name string, data []byte, keys *Keys) ([]Var, error) {
	if f := FormatOf(name); f != Dotenv {
		return nil, fmt.Errorf("%s: a SOPS %s file, not dotenv (a name ending in .env)", name, f)
	}
	plain, err := Decrypt(name, data, keys)
	if err != nil {
		return nil, err
	}
	defer clear(plain)
	vars, err := ParseEnv(plain)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return vars, nil
}
