package main

// The generated references: docs/cli (Markdown), docs/man (man pages),
// docs/config.md (every Agent field) and docs/schema (JSON Schema for every
// kind and for the Agent file). They are made from the cobra commands, the
// flags and the Go types, and committed; TestGeneratedDocs fails when one is
// stale. `make docs` (go test ./cmd/cortex-sync -run TestGeneratedDocs
// -update) rewrites them.

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

var update = flag.Bool("update", false, "rewrite the generated docs (make docs)")

// generatedDirs are rewritten whole: every file in them is generated.
var generatedDirs = []string{"docs/cli", "docs/man", "docs/schema"}

// repoRoot is the repository, seen from this package's directory.
const repoRoot = "../.."

func TestGeneratedDocs(t *testing.T) {
	files := map[string][]byte{}
	for _, gen := range []func(map[string][]byte) error{genCLIDocs, genManPages, genConfigDoc, genSchemas} {
		if err := gen(files); err != nil {
			t.Fatal(err)
		}
	}
	if *update {
		for _, d := range generatedDirs {
			if err := os.RemoveAll(filepath.Join(repoRoot, d)); err != nil {
				t.Fatal(err)
			}
		}
		for name, data := range files {
			p := filepath.Join(repoRoot, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	var stale []string
	for name, data := range files {
		have, err := os.ReadFile(filepath.Join(repoRoot, name))
		if err != nil || !bytes.Equal(have, data) {
			stale = append(stale, name)
		}
	}
	for _, d := range generatedDirs {
		entries, _ := os.ReadDir(filepath.Join(repoRoot, d))
		for _, e := range entries {
			if name := d + "/" + e.Name(); files[name] == nil {
				stale = append(stale, name+" (no longer generated)")
			}
		}
	}
	if len(stale) > 0 {
		slices.Sort(stale)
		t.Errorf("generated docs are stale; run make docs:\n  %s", strings.Join(stale, "\n  "))
	}
}

// TestCommandsHaveExamples: every command's --help shows examples. Cobra's
// own help command explains itself.
func TestCommandsHaveExamples(t *testing.T) {
	walkCommands(docRoot(), func(c *cobra.Command) {
		if c.Example == "" && c.Name() != "help" {
			t.Errorf("%s has no Example", c.CommandPath())
		}
	})
}

// docRoot is the command tree as users see it, with defaults that depend on
// the machine (CPUs, user, environment) spelled in words, so the generated
// files are the same wherever they are made.
func docRoot() *cobra.Command {
	root := newRootCmd(streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard})
	root.DisableAutoGenTag = true
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.InitDefaultVersionFlag()
	walkCommands(root, func(c *cobra.Command) {
		visit := func(f *pflag.Flag) {
			switch f.Name {
			case "concurrency":
				f.DefValue = "number of CPUs"
			case "state-dir":
				if !strings.Contains(f.Usage, "as root") {
					f.Usage = strings.Replace(f.Usage, state.DefaultDir(), "/var/lib/cortex-sync as root, else $XDG_STATE_HOME/cortex-sync", 1)
				}
			}
		}
		c.LocalFlags().VisitAll(visit)
		c.PersistentFlags().VisitAll(visit)
	})
	return root
}

func walkCommands(c *cobra.Command, fn func(*cobra.Command)) {
	if c.Hidden {
		return
	}
	fn(c)
	for _, sub := range c.Commands() {
		walkCommands(sub, fn)
	}
}

// genTree runs a cobra/doc generator into a temporary directory and adds
// what it wrote under dir.
func genTree(files map[string][]byte, dir string, gen func(tmp string) error, fix func([]byte) []byte) error {
	tmp, err := os.MkdirTemp("", "cortex-sync-docs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := gen(tmp); err != nil {
		return err
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(tmp, e.Name()))
		if err != nil {
			return err
		}
		files[dir+"/"+e.Name()] = fix(data)
	}
	return nil
}

func genCLIDocs(files map[string][]byte) error {
	root := docRoot()
	prepend := func(string) string {
		return "<!-- Generated from the commands by `make docs`; do not edit. -->\n\n"
	}
	link := func(name string) string { return name }
	return genTree(files, "docs/cli", func(tmp string) error {
		return doc.GenMarkdownTreeCustom(root, tmp, prepend, link)
	}, func(b []byte) []byte { return b })
}

// manDate stands in for the date a man page would carry, and is cut out:
// a page that changed with the calendar would always be stale.
var manDate = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func genManPages(files map[string][]byte) error {
	root := docRoot()
	header := &doc.GenManHeader{Title: "CORTEX-SYNC", Section: "1", Source: "cortex-sync", Manual: "cortex-sync manual", Date: &manDate}
	return genTree(files, "docs/man", func(tmp string) error {
		return doc.GenManTree(root, header, tmp)
	}, func(b []byte) []byte {
		return bytes.Replace(b, []byte(fmt.Sprintf("%q", manDate.Format("Jan 2006"))), []byte(`""`), 1)
	})
}
