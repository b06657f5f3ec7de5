package resource_test

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

const header = "apiVersion: cortex-sync/v1alpha1\n"

func load(t *testing.T, files map[string]string) (*resource.Set, error) {
	t.Helper()
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(data), Mode: 0o644}
	}
	return resource.Load(fsys, ".", driver.Kinds())
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		want    fs.FileMode
		wantErr bool
	}{
		{"0640", 0o640, false},
		{"640", 0o640, false},
		{"0o755", 0o755, false},
		{"1777", 0o777 | fs.ModeSticky, false},
		{"4755", 0o755 | fs.ModeSetuid, false},
		{"0999", 0, true},
		{"416", 0o416, false}, // octal digits are octal, however they look
		{"rw-r--r--", 0, true},
		{"07777777", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := resource.ParseMode(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseMode(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && got.FileMode() != tt.want {
			t.Errorf("ParseMode(%q) = %v, want %v", tt.in, got.FileMode(), tt.want)
		}
	}
}

func TestYAML12Scalars(t *testing.T) {
	set, err := load(t, map[string]string{"a.yaml": header + `kind: File
metadata: {name: a}
spec:
  path: /a
  content: yes
  mode: 0640
---
# an empty document between two is skipped
---
` + header + `kind: File
metadata: {name: b}
spec: {path: /b, content: "on", mode: "0600"}
`})
	if err != nil {
		t.Fatal(err)
	}
	a := set.Get("File/a").Spec.(*driver.FileSpec)
	if *a.Content != "yes" {
		t.Errorf("content: yes decoded as %q, want the string \"yes\"", *a.Content)
	}
	if a.Mode.FileMode() != 0o640 {
		t.Errorf("unquoted mode 0640 decoded as %o, want 0640", a.Mode.FileMode())
	}
	if b := set.Get("File/b"); b == nil || b.Origin.Doc != 3 {
		t.Fatalf("File/b: %+v, want it read from document 3", b)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name, file, want string
	}{
		{"unknown field", header + "kind: File\nmetadata: {name: a}\nspec: {path: /a, content: x, mdoe: \"0644\"}\n",
			`a.yaml:4: document 1 (File/a): spec.mdoe: unknown field (did you mean "mode"?)`},
		{"unknown top field", header + "kind: File\nmetadata: {name: a}\nspec: {path: /a, content: x}\nstatus: {}\n",
			`a.yaml:5: document 1 (File/a): status: unknown field`},
		{"wrong type", header + "kind: File\nmetadata: {name: a}\nspec: {path: /a, content: x, sensitive: maybe}\n",
			`spec.sensitive: must be true or false, not the string "maybe"`},
		{"relative path", header + "kind: File\nmetadata: {name: a}\nspec: {path: etc/a, content: x}\n",
			`spec.path: "etc/a" must be an absolute path`},
		{"unclean path", header + "kind: File\nmetadata: {name: a}\nspec: {path: /etc//a, content: x}\n",
			`spec.path: "/etc//a" is not clean; write "/etc/a"`},
		{"missing content", header + "kind: File\nmetadata: {name: a}\nspec: {path: /a}\n",
			`spec: content or source is required`},
		{"bad ensure", header + "kind: File\nmetadata: {name: a}\nspec: {path: /a, content: x, ensure: gone}\n",
			`spec.ensure: "gone" must be one of present, absent`},
		{"no spec", header + "kind: File\nmetadata: {name: a}\n", `spec: is required`},
		{"not a mapping", "- a\n- b\n", `a manifest must be a mapping`},
		{"data, not a manifest", "listen: 127.0.0.1:8080\n", `a.yaml:1: document 1: not a cortex-sync manifest (no apiVersion or kind); if this YAML is data, list it in .cortexignore`},
		{"duplicate id", header + "kind: File\nmetadata: {name: a}\nspec: {path: /a, content: x}\n---\n" + header + "kind: File\nmetadata: {name: a}\nspec: {path: /b, content: x}\n",
			`document 2 (File/a): metadata.name: File/a is already declared in a.yaml (document 1)`},
		{"bad duration-free symlink", header + "kind: Symlink\nmetadata: {name: l}\nspec: {path: /l}\n", `spec.target: is required`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, map[string]string{"a.yaml": tt.file})
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
			var fe *resource.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T carries no FieldError", err)
			}
		})
	}
}

func TestAllProblemsReported(t *testing.T) {
	_, err := load(t, map[string]string{
		"a.yaml": header + "kind: File\nmetadata: {name: a}\nspec: {path: a, content: x}\n",
		"b.yaml": header + "kind: File\nmetadata: {name: b}\nspec: {path: /b, content: x, mode: \"0999\"}\n",
	})
	var p resource.Problems
	if !errors.As(err, &p) || len(p) != 2 {
		t.Fatalf("got %v, want both files' problems", err)
	}
}

func TestIgnoreFiles(t *testing.T) {
	set, err := load(t, map[string]string{
		".cortexignore":      "kb/\n*.draft.yaml\n",
		"a.yaml":             header + "kind: File\nmetadata: {name: a}\nspec: {path: /a, content: x}\n",
		"b.draft.yaml":       "not: a manifest\n",
		"kb/data.yaml":       "not: a manifest\n",
		"sub/.cortexignore":  "local.yml\n",
		"sub/local.yml":      "not: a manifest\n",
		"sub/c.yml":          header + "kind: File\nmetadata: {name: c}\nspec: {path: /c, content: x}\n",
		"other/local.yml":    header + "kind: File\nmetadata: {name: d}\nspec: {path: /d, content: x}\n",
		"notes/readme.md":    "not yaml at all",
		".git/config.yaml":   "never read\n",
		"deep/er/e.yaml":     header + "kind: File\nmetadata: {name: e}\nspec: {path: /e, content: x}\n",
		"deep/er/skip/x.yml": "bad: [",
		"deep/.cortexignore": "er/skip\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range set.Resources() {
		ids = append(ids, string(r.ID()))
	}
	if got, want := strings.Join(ids, " "), "File/a File/c File/d File/e"; got != want {
		t.Fatalf("loaded %s, want %s", got, want)
	}
}

func TestOrder(t *testing.T) {
	set, err := load(t, map[string]string{"a.yaml": header + `kind: File
metadata: {name: conf}
spec: {path: /etc/app/conf, content: x}
---
` + header + `kind: Directory
metadata: {name: app}
spec: {path: /etc/app}
---
` + header + `kind: Symlink
metadata: {name: link}
spec: {path: /link, target: /etc/app/conf, dependsOn: [File/conf]}
`})
	if err != nil {
		t.Fatal(err)
	}
	var levels []string
	for _, l := range set.Levels() {
		var ids []string
		for _, r := range l {
			ids = append(ids, string(r.ID()))
		}
		levels = append(levels, strings.Join(ids, ","))
	}
	// The file inside a managed directory comes after it, implicitly.
	if got, want := strings.Join(levels, " | "), "Directory/app | File/conf | Symlink/link"; got != want {
		t.Fatalf("levels %s, want %s", got, want)
	}
}

func TestCycleIsNamed(t *testing.T) {
	_, err := load(t, map[string]string{"a.yaml": header + `kind: Directory
metadata: {name: d}
spec: {path: /d, dependsOn: [File/f]}
---
` + header + `kind: File
metadata: {name: f}
spec: {path: /d/f, content: x}
`})
	if err == nil || !strings.Contains(err.Error(), "dependency cycle: Directory/d -> File/f -> Directory/d") {
		t.Fatalf("got %v, want the cycle named", err)
	}
}
