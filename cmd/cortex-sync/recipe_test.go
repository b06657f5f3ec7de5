package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
	"go.yaml.in/yaml/v3"
)

// cmdRecipe runs a shell script of a CI recipe, as CI would, in the
// script's current directory with cortex-sync on PATH. KEY is the
// dotted path to the script in the YAML file, numbers indexing lists;
// a list of lines (GitLab's script) runs as one script.
//
//	recipe FILE KEY
func cmdRecipe(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: recipe FILE KEY")
	}
	data, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	var v any
	ts.Check(yaml.Unmarshal(data, &v))
	script, err := recipeScript(v, args[1])
	if err != nil {
		ts.Fatalf("%s: %v", args[0], err)
	}
	err = ts.Exec("sh", "-ec", script)
	switch {
	case err != nil && !neg:
		ts.Fatalf("%s %s: %v", args[0], args[1], err)
	case err == nil && neg:
		ts.Fatalf("%s %s: succeeded", args[0], args[1])
	}
}

// recipeScript finds the script at key (a.b.0.c) in a decoded YAML value.
func recipeScript(v any, key string) (string, error) {
	for _, k := range strings.Split(key, ".") {
		switch n := v.(type) {
		case map[string]any:
			v = n[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(n) {
				return "", fmt.Errorf("%s: no item %q in a list of %d", key, k, len(n))
			}
			v = n[i]
		default:
			return "", fmt.Errorf("%s: nothing at %q", key, k)
		}
	}
	switch s := v.(type) {
	case string:
		return s, nil
	case []any:
		lines := make([]string, len(s))
		for i, l := range s {
			lines[i] = fmt.Sprint(l)
		}
		return strings.Join(lines, "\n"), nil
	}
	return "", fmt.Errorf("%s: %T is not a script", key, v)
}
