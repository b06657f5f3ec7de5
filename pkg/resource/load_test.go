package resource_test

import (
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

func TestUnknownKindSuggests(t *testing.T) {
	_, err := load(t, map[string]string{"a.yaml": header + "kind: Flie\nmetadata: {name: a}\nspec: {path: /a, content: x}\n"})
	want := `a.yaml:2: document 1 (Flie/a): kind: unknown kind "Flie" (did you mean "File"?); known kinds: Command, Directory, File, Process, Symlink`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, want)
	}
}

func TestDidYouMean(t *testing.T) {
	known := []string{"branch", "tag", "semver", "commit", "path", "root"}
	tests := []struct{ name, want string }{
		{"brnach", ` (did you mean "branch"?)`},
		{"BRANCH", ` (did you mean "branch"?)`},
		{"pth", ` (did you mean "path"?)`},
		{"rooot", ` (did you mean "root"?)`},
		{"interval", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := resource.DidYouMean(tt.name, known); got != tt.want {
			t.Errorf("DidYouMean(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
	// Ties go to the first in sorted order, so the hint never flickers.
	for range 20 {
		if got := resource.DidYouMean("ab", []string{"ax", "aa", "ay"}); got != ` (did you mean "aa"?)` {
			t.Fatalf("tie broken as %q, want the first in sorted order", got)
		}
	}
}
