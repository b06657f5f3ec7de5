package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocLinks: every relative link of the README and docs/*.md names a
// file that exists and, with a #fragment, a heading of that file (as
// GitHub makes its anchors).
func TestDocLinks(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			l := m[1]
			if strings.Contains(l, "://") || strings.HasPrefix(l, "mailto:") {
				continue
			}
			p, frag, _ := strings.Cut(l, "#")
			target := f
			if p != "" {
				target = filepath.Join(filepath.Dir(f), p)
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: %s: no such file", filepath.Base(f), l)
				continue
			}
			if frag != "" && strings.HasSuffix(target, ".md") && !anchors(t, target)[frag] {
				t.Errorf("%s: %s: no such heading in %s", filepath.Base(f), l, filepath.Base(target))
			}
		}
	}
}

// anchors are the heading anchors of a markdown file, as GitHub makes
// them: lower case, punctuation dropped, spaces as hyphens.
func anchors(t *testing.T, file string) map[string]bool {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
	}
	return out
}
