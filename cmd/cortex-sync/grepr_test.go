package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdGrepR looks for a literal string in every file under DIR, skipping
// the directories named by -x (relative to DIR); it prints where it found
// it. "! grepr" asserts it is nowhere:
//
//	grepr [-x SUBDIR]... STRING DIR
func cmdGrepR(ts *testscript.TestScript, neg bool, args []string) {
	var skip []string
	for len(args) > 2 && args[0] == "-x" {
		skip, args = append(skip, args[1]), args[2:]
	}
	if len(args) != 2 {
		ts.Fatalf("usage: grepr [-x SUBDIR]... STRING DIR")
	}
	want, dir := []byte(args[0]), ts.MkAbs(args[1])
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			for _, s := range skip {
				if rel == s {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, want) {
			found = append(found, rel)
		}
		return nil
	})
	if err != nil {
		ts.Fatalf("grepr: %v", err)
	}
	if len(found) > 0 {
		ts.Logf("%q found in %s", args[0], strings.Join(found, ", "))
	}
	switch {
	case neg && len(found) > 0:
		ts.Fatalf("%q is in %d files under %s", args[0], len(found), args[1])
	case !neg && len(found) == 0:
		ts.Fatalf("%q is in no file under %s", args[0], args[1])
	}
}
