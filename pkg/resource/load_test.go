package resource_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

func loadWith(t *testing.T, opts resource.Options, files map[string]string) (*resource.Set, error) {
	t.Helper()
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(data), Mode: 0o644}
	}
	return opts.Load(fsys, ".", driver.Kinds())
}

func TestAllowedPaths(t *testing.T) {
	srvEtc := []string{"/srv", "/etc/app"}
	tests := []struct {
		name    string
		allowed []string
		spec    string // a document after apiVersion
		want    string // "" when it loads
	}{
		{"file outside", srvEtc, "kind: File\nmetadata: {name: evil}\nspec: {path: /usr/local/bin/evil, content: x}\n",
			`a.yaml:4: document 1 (File/evil): spec.path: /usr/local/bin/evil is outside the allowed paths (/srv, /etc/app); add --allowed-path or move it`},
		{"file inside", srvEtc, "kind: File\nmetadata: {name: a}\nspec: {path: /srv/app/a, content: x}\n", ""},
		{"the allowed path itself", srvEtc, "kind: Directory\nmetadata: {name: app}\nspec: {path: /etc/app}\n", ""},
		{"above an allowed path", srvEtc, "kind: Directory\nmetadata: {name: etc}\nspec: {path: /etc}\n",
			`(Directory/etc): spec.path: /etc is outside the allowed paths`},
		{"a prefix is not a parent", srvEtc, "kind: File\nmetadata: {name: a}\nspec: {path: /srvx, content: x}\n",
			`spec.path: /srvx is outside the allowed paths`},
		{"symlink outside", srvEtc, "kind: Symlink\nmetadata: {name: l}\nspec: {path: /usr/bin/l, target: /srv/x}\n",
			`(Symlink/l): spec.path: /usr/bin/l is outside the allowed paths`},
		{"absent is still a write", srvEtc, "kind: File\nmetadata: {name: a}\nspec: {path: /var/a, ensure: absent}\n",
			`(File/a): spec.path: /var/a is outside the allowed paths`},
		{"mirrored tree inside", srvEtc, "kind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n", ""},
		{"a command claims no path", srvEtc, "kind: Command\nmetadata: {name: c}\nspec: {command: [true], creates: /var/done}\n", ""},
		{"a trailing slash is cleaned", []string{"/srv/"}, "kind: File\nmetadata: {name: a}\nspec: {path: /srv/a, content: x}\n", ""},
		{"slash allows all", []string{"/"}, "kind: File\nmetadata: {name: a}\nspec: {path: /usr/a, content: x}\n", ""},
		{"none given allows all", nil, "kind: File\nmetadata: {name: a}\nspec: {path: /usr/a, content: x}\n", ""},
		{"a relative allowed path", []string{"srv"}, "kind: File\nmetadata: {name: a}\nspec: {path: /srv/a, content: x}\n",
			`allowed path "srv" must be absolute`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadWith(t, resource.Options{AllowedPaths: tt.allowed}, map[string]string{
				"a.yaml":     header + tt.spec,
				"kb/read.md": "kb",
			})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error:\n%v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("no error, want %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
		})
	}
}

func TestPathsAreText(t *testing.T) {
	tests := []struct {
		name, spec, want string
	}{
		{"NUL in a file's path", "kind: File\nmetadata: {name: a}\nspec: {path: \"/srv/a\\0b\", content: x}\n",
			`a.yaml:4: document 1 (File/a): spec.path: "/srv/a\x00b" contains a NUL byte, which no path can hold`},
		{"non-UTF-8 path", "kind: File\nmetadata: {name: a}\nspec: {path: !!binary L3Nydi//, content: x}\n",
			`a.yaml:4: document 1 (File/a): spec.path: "/srv/\xff" is not valid UTF-8`},
		{"NUL in a source", "kind: File\nmetadata: {name: a}\nspec: {path: /srv/a, source: \"f\\0\"}\n",
			`(File/a): spec.source: "f\x00" contains a NUL byte`},
		{"NUL in a symlink's target", "kind: Symlink\nmetadata: {name: l}\nspec: {path: /srv/l, target: \"/x\\0\"}\n",
			`(Symlink/l): spec.target: "/x\x00" contains a NUL byte`},
		{"NUL in a working directory", "kind: Process\nmetadata: {name: p}\nspec: {command: [sleep, \"1\"], workingDir: \"/srv\\0\"}\n",
			`(Process/p): spec.workingDir: "/srv\x00" contains a NUL byte`},
		{"non-UTF-8 creates", "kind: Command\nmetadata: {name: c}\nspec: {command: [\"true\"], creates: !!binary L3Nydi//}\n",
			`(Command/c): spec.creates: "/srv/\xff" is not valid UTF-8`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, map[string]string{"a.yaml": header + tt.spec})
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
		})
	}
	// A File's content is data, not a path: NUL and any bytes stay allowed.
	if _, err := load(t, map[string]string{"a.yaml": header + "kind: File\nmetadata: {name: a}\nspec: {path: /a, content: \"a\\0b\"}\n"}); err != nil {
		t.Fatalf("NUL in content: %v", err)
	}
}

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

// TestEveryProblemTogether: a document's spec is checked even when its
// name is wrong, and what holds across documents (an ID declared twice, a
// dependency) counts a document that has problems of its own: one
// validate lists it all, and names no dependency missing that is declared.
func TestEveryProblemTogether(t *testing.T) {
	_, err := load(t, map[string]string{"a.yaml": header + "kind: File\nmetadata: {name: Bad_Name}\nspec: {path: relative/path, content: x}\n---\n" +
		header + "kind: File\nmetadata: {name: base}\nspec: {path: /etc/base, content: x, mode: \"0999\"}\n---\n" +
		header + "kind: File\nmetadata: {name: user}\nspec: {path: /etc/user, content: x, dependsOn: [File/base]}\n---\n" +
		header + "kind: File\nmetadata: {name: base}\nspec: {path: /etc/base2, content: x}\n"})
	if err == nil {
		t.Fatal("loaded")
	}
	for _, want := range []string{
		`a.yaml:3: document 1 (File/Bad_Name): metadata.name: "Bad_Name" must be a lowercase RFC 1123 name`,
		`a.yaml:4: document 1 (File/Bad_Name): spec.path: "relative/path" must be an absolute path`,
		`a.yaml:9: document 2 (File/base): spec.mode: "0999" is not an octal file mode`,
		`a.yaml:18: document 4 (File/base): metadata.name: File/base is already declared in a.yaml (document 2)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error:\n%v\nwant it to contain:\n%s", err, want)
		}
	}
	if strings.Contains(err.Error(), "not declared") {
		t.Errorf("a dependency on a declared resource with problems is said missing:\n%v", err)
	}
	// The same without the second File/base: still no missing dependency.
	_, err = load(t, map[string]string{"a.yaml": header + "kind: File\nmetadata: {name: base}\nspec: {path: /etc/base, content: x, mode: \"0999\"}\n---\n" +
		header + "kind: File\nmetadata: {name: user}\nspec: {path: /etc/user, content: x, dependsOn: [File/base]}\n"})
	if err == nil || strings.Contains(err.Error(), "not declared") || !strings.Contains(err.Error(), "0999") {
		t.Errorf("error:\n%v", err)
	}
}
