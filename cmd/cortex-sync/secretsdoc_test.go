package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestSecretsDocNamesAgeKeyCommands: secrets.md, where a user sets up the
// age key, names every command that takes --age-key-file.
func TestSecretsDocNamesAgeKeyCommands(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "secrets.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, para, _ := strings.Cut(string(b), "Give it to cortex-sync with `--age-key-file")
	para, _, _ = strings.Cut(para, "\n\n")
	n := 0
	walkCommands(docRoot(), func(c *cobra.Command) {
		if c.LocalFlags().Lookup("age-key-file") == nil {
			return
		}
		n++
		if name := strings.TrimPrefix(c.CommandPath(), "cortex-sync "); !strings.Contains(para, "`"+name+"`") {
			t.Errorf("secrets.md does not name `%s` among the commands that take --age-key-file", name)
		}
	})
	if n < 5 {
		t.Fatalf("%d commands take --age-key-file", n)
	}
}
