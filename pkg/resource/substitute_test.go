package resource_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/vars"
)

func mapFS(files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(data), Mode: 0o644}
	}
	return fsys
}

const varsFleet = `apiVersion: cortex-sync/v1alpha1
kind: Fleet
metadata: {name: prod}
spec:
  hosts:
    - match: {name: "web*"}
      paths: [base]
      vars: {a: rule1, b: rule1}
      varsFiles: [vars/web.yaml]
    - match: {}
      paths: [base]
      vars: {a: rule2, c: rule2, d: rule2}
      varsFiles: [vars/common.yaml, "vars/{name}.yaml", vars/secret.yaml]
`

func varsTree() fstest.MapFS {
	return mapFS(map[string]string{
		"fleet.yaml":       varsFleet,
		"base/x.yaml":      header + "kind: File\nmetadata: {name: x}\nspec: {path: /x, content: x}\n",
		"vars/web.yaml":    "b: webfile\ne: webfile\n",
		"vars/common.yaml": "c: common\nd: common\nf: common\ng: common\n",
		"vars/web1.yaml":   "f: web1\n",
		"vars/secret.yaml": "g: ENC[x]\nsops: {age: []}\n",
	})
}

func decryptTo(plain string) vars.Decrypt {
	return func(string, []byte) ([]byte, error) { return []byte(plain), nil }
}

// TestFleetVarsPrecedence: facts cannot be overridden; an earlier matching
// rule beats a later one; a rule's vars beat its files; a later file beats
// an earlier one; a SOPS file's values are secret.
func TestFleetVarsPrecedence(t *testing.T) {
	tree := varsTree()
	f, err := resource.ReadFleet(tree)
	if err != nil {
		t.Fatal(err)
	}
	s, err := f.Vars(tree, resource.Host{Name: "web1", Labels: map[string]string{"role": "web"}, MachineID: "m1"}, decryptTo("g: secretvalue\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"host.name": "web1", "host.labels.role": "web", "host.machineID": "m1",
		"a": "rule1",   // rule 1 beats rule 2
		"b": "rule1",   // a rule's vars beat its own file
		"e": "webfile", // from rule 1's file
		"c": "rule2",   // rule 2's vars beat its files
		"d": "rule2",
		"f": "web1",        // vars/{name}.yaml beats vars/common.yaml, listed before it
		"g": "secretvalue", // the last file, decrypted, beats both
	}
	for name, text := range want {
		v, ok := s.Lookup(name)
		if !ok || v.Text != text {
			t.Errorf("%s = %q (defined %v); want %q", name, v.Text, ok, text)
		}
	}
	if v, _ := s.Lookup("g"); !v.Secret || v.Shown() != vars.Redacted || v.From != "vars/secret.yaml" {
		t.Errorf("g = %+v; want a secret from vars/secret.yaml", v)
	}
	if v, _ := s.Lookup("a"); v.From != "fleet.yaml rule 1" {
		t.Errorf("a comes from %q", v.From)
	}

	// A host of rule 2 only, without a file of its own.
	s, err = f.Vars(tree, resource.Host{Name: "db1"}, decryptTo("g: s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Lookup("a"); v.Text != "rule2" {
		t.Errorf("db1: a = %q", v.Text)
	}
	if v, _ := s.Lookup("f"); v.Text != "common" {
		t.Errorf("db1: f = %q", v.Text)
	}
	if _, ok := s.Lookup("host.machineID"); ok {
		t.Error("a host without a machine ID has one")
	}

	// No key: the encrypted file's names are defined, locked (SOPS
	// leaves names in the clear); a rendering that uses one fails, naming
	// it, its file, the host and the flag; the rest renders.
	s, err = f.Vars(tree, resource.Host{Name: "db1"}, nil)
	if err != nil {
		t.Fatalf("no key: %v", err)
	}
	if v, ok := s.Lookup("g"); !ok || !v.Locked || !v.Secret || v.Text != "" || v.Shown() != vars.RedactedLocked || v.From != "vars/secret.yaml" {
		t.Errorf("no key: g = %+v (defined %v); want it locked, from vars/secret.yaml", v, ok)
	}
	if out, _, err := vars.Render("${a}", s); err != nil || out != "rule2" {
		t.Errorf("no key: a plain variable renders %q, %v", out, err)
	}
	_, _, err = vars.Render("${g}", s)
	if err == nil || err.Error() != `line 1, column 1: ${g} is a secret of vars/secret.yaml, which is SOPS-encrypted, and host "db1" has no age key to decrypt it: give --age-key-file (or SOPS_AGE_KEY_FILE)` {
		t.Errorf("no key: a locked variable renders: %v", err)
	}
	if out, used, err := vars.Render("[${g}]", s.Lenient()); err != nil || out != "[]" || !used.Secret() {
		t.Errorf("no key, lenient (a fleet's syntax): %q, %v, %v; want it rendered empty, a secret used", out, used, err)
	}
}

func TestFleetVarsProblems(t *testing.T) {
	for _, tc := range []struct{ fleet, want string }{
		{"      vars: {host.name: x}\n", `fleet.yaml:7: document 1 (Fleet/prod): spec.hosts[0].vars.host.name: "host.name": names under host. are the host's facts`},
		{"      vars: {\"a b\": x}\n", `spec.hosts[0].vars.a b: "a b" is not a variable name`},
		{"      varsFiles: [/etc/x.yaml]\n", `spec.hosts[0].varsFiles[0]: "/etc/x.yaml" must be a file inside the repository`},
		{"      varsFiles: [../x.yaml]\n", `must be a file inside the repository`},
		{"      varsFiles: [\"vars/{host}.yaml\"]\n", `{host} is not a placeholder`},
	} {
		tree := mapFS(map[string]string{
			"fleet.yaml":  "apiVersion: cortex-sync/v1alpha1\nkind: Fleet\nmetadata: {name: prod}\nspec:\n  hosts:\n    - paths: [base]\n" + tc.fleet,
			"base/x.yaml": header + "kind: File\nmetadata: {name: x}\nspec: {path: /x, content: x}\n",
		})
		_, err := resource.ReadFleet(tree)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.fleet, err, tc.want)
		}
	}
	// A vars file written out that is not there.
	tree := varsTree()
	delete(tree, "vars/common.yaml")
	f, _ := resource.ReadFleet(tree)
	if _, err := f.Vars(tree, resource.Host{Name: "db1"}, decryptTo("g: s\n")); err == nil || !strings.Contains(err.Error(), `spec.hosts[1].varsFiles[0]: "vars/common.yaml" is not a file of the repository`) {
		t.Errorf("a missing file: %v", err)
	}
}

// TestLoadSubstitute: a File, a Process and a Directory are rendered for
// the host when they load; problems name the manifest's line, the field,
// the variable and the host.
func TestLoadSubstitute(t *testing.T) {
	tree := varsTree()
	tree["base/x.yaml"] = &fstest.MapFile{Data: []byte(header + `kind: File
metadata: {name: x}
spec:
  path: /x
  substitute: true
  content: |
    a=${a}
    id=$${a}
---
` + header + `kind: File
metadata: {name: y}
spec: {path: /y, source: t.conf, substitute: true}
---
` + header + `kind: File
metadata: {name: secret}
spec: {path: /s, content: "${g}", substitute: true}
---
` + header + `kind: File
metadata: {name: plain}
spec: {path: /p, content: "${a}"}
`)}
	tree["base/t.conf"] = &fstest.MapFile{Data: []byte("host ${host.name}\n")}
	opts := resource.Options{Host: resource.Host{Name: "web1"}, Decrypt: decryptTo("g: hunter2\n")}
	set, err := opts.Load(tree, ".", driver.Kinds())
	if err != nil {
		t.Fatal(err)
	}
	content := func(id string) (string, bool) {
		r := set.Get(resource.ID(id))
		s := r.Spec.(*driver.FileSpec)
		return *s.Content, s.Sensitive
	}
	if c, _ := content("File/x"); c != "a=rule1\nid=${a}\n" {
		t.Errorf("File/x = %q", c)
	}
	if c, _ := content("File/y"); c != "host web1\n" {
		t.Errorf("File/y = %q", c)
	}
	if c, sensitive := content("File/secret"); c != "hunter2" || !sensitive {
		t.Errorf("File/secret = %q, sensitive %v; a secret makes it sensitive", c, sensitive)
	}
	if c, _ := content("File/plain"); c != "${a}" {
		t.Errorf("File/plain = %q; without substitute: true nothing is rendered", c)
	}
	sub := set.Get("File/x").Substituted()
	if sub == nil || sub.Used["a"].Text != "rule1" || len(sub.Used) != 1 || sub.Template == "" {
		t.Errorf("File/x's substitution = %+v", sub)
	}
	if set.Get("File/plain").Substituted() != nil {
		t.Error("File/plain is substituted")
	}

	// Every problem at once, each where it is.
	tree["base/x.yaml"] = &fstest.MapFile{Data: []byte(header + `kind: File
metadata: {name: x}
spec:
  path: /x
  substitute: true
  content: |
    fine ${a}
    bad ${zz}
---
` + header + `kind: Command
metadata: {name: c}
spec:
  command: [/bin/echo, "${host.name}", "${nope}"]
  substitute: true
  env: {A: "${a", B: "${g}"}
`)}
	_, err = opts.Load(tree, ".", driver.Kinds())
	for _, want := range []string{
		`base/x.yaml:9: document 1 (File/x): spec.content: ${zz} is not defined for host "web1"`,
		`base/x.yaml:15: document 2 (Command/c): spec.command[2]: ${nope} is not defined for host "web1"`,
		`base/x.yaml:17: document 2 (Command/c): spec.env.A: ${ is not closed`,
		`(Command/c): spec.substitute: a secret variable (from an encrypted vars file) cannot be used in env or command`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in:\n%v", want, err)
		}
	}
}

// TestLoadWithoutFleet: a host without fleet.yaml has its facts alone.
func TestLoadWithoutFleet(t *testing.T) {
	tree := mapFS(map[string]string{
		"a.yaml": header + "kind: File\nmetadata: {name: a}\nspec: {path: /a, content: \"${host.name} ${host.labels.role}\", substitute: true}\n",
	})
	set, err := resource.Options{Host: resource.Host{Name: "h", Labels: map[string]string{"role": "db"}}}.Load(tree, ".", driver.Kinds())
	if err != nil {
		t.Fatal(err)
	}
	if c := *set.Get("File/a").Spec.(*driver.FileSpec).Content; c != "h db" {
		t.Errorf("content = %q", c)
	}
	_, err = resource.Options{Host: resource.Host{Name: "h"}}.Load(tree, ".", driver.Kinds())
	if err == nil || !strings.Contains(err.Error(), `spec.content: ${host.labels.role} is not defined for host "h"`) {
		t.Errorf("a missing label: %v", err)
	}
}

// TestSubstituteBounds: what is rendered in memory is bounded, and a
// secret is kept out of what would show or store it unkeyed.
func TestSubstituteBounds(t *testing.T) {
	big := strings.Repeat("x", resource.MaxTemplateBytes+1)
	many := map[string]string{}
	for i := range driver.MaxSubstitutedFiles + 1 {
		many[fmt.Sprintf("many/f%04d", i)] = "x"
	}
	heavy := map[string]string{}
	for i := range resource.MaxTreeBytes/resource.MaxTemplateBytes + 1 {
		heavy[fmt.Sprintf("heavy/f%02d", i)] = big[:resource.MaxTemplateBytes]
	}
	for _, tc := range []struct {
		name, doc string
		extra     map[string]string
		want      string
	}{
		{"a large source", "kind: File\nmetadata: {name: a}\nspec: {path: /a, source: big.txt, substitute: true}\n",
			map[string]string{"base/big.txt": big}, "spec.source: base/big.txt is larger than the 1048576 bytes a substituted file may hold"},
		{"a binary source", "kind: File\nmetadata: {name: a}\nspec: {path: /a, source: bin, substitute: true}\n",
			map[string]string{"base/bin": "ok\n\xff\xfe"}, "spec.source: base/bin:2: byte 0xff (column 1) is not UTF-8"},
		{"a tree of too many files", "kind: Directory\nmetadata: {name: d}\nspec: {path: /d, source: ../many, substitute: true}\n",
			many, "spec.source: many: more than 1000 files; a substituted Directory may hold at most 1000"},
		{"a tree of too many bytes", "kind: Directory\nmetadata: {name: d}\nspec: {path: /d, source: ../heavy, substitute: true}\n",
			heavy, "spec.source: heavy: more than 16777216 bytes rendered; a substituted Directory may hold at most 16777216 in all"},
		{"a tree with a bad file", "kind: Directory\nmetadata: {name: d}\nspec: {path: /d, source: ../site, substitute: true}\n",
			map[string]string{"site/a/b.html": "ok\n${nope}\n"}, `spec.source: site/a/b.html:2:1: ${nope} is not defined for host "web1"`},
		{"a secret in a tree", "kind: Directory\nmetadata: {name: d}\nspec: {path: /d, source: ../site, substitute: true}\n",
			map[string]string{"site/a.html": "${g}"}, "spec.substitute: a secret variable (from an encrypted vars file) cannot be used in a Directory"},
		{"a Directory without a source", "kind: Directory\nmetadata: {name: d}\nspec: {path: /d, substitute: true}\n",
			nil, "spec.substitute: a Directory without a source has nothing to substitute"},
		{"a Symlink", "kind: Symlink\nmetadata: {name: l}\nspec: {path: /l, target: /x, substitute: true}\n",
			nil, "spec.substitute: a Symlink has nothing to substitute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := varsTree()
			tree["base/x.yaml"] = &fstest.MapFile{Data: []byte(header + tc.doc)}
			for k, v := range tc.extra {
				tree[k] = &fstest.MapFile{Data: []byte(v)}
			}
			_, err := resource.Options{Host: resource.Host{Name: "web1"}, Decrypt: decryptTo("g: hunter2\n")}.Load(tree, ".", driver.Kinds())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the secret shows: %v", err)
			}
		})
	}
}
