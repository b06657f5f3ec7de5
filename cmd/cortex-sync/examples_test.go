package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// exampleRoots are the manifest folders under examples/: what --dir (or
// the Agent file's path) points at.
var exampleRoots = []string{"quickstart", "kb-host", "fleet/hosts/web1", "fleet/hosts/db1", "fleet/roles/web"}

// TestExamples syncs every example into a temporary root
// (testdata/examples/*.txtar), with $EXAMPLES naming examples/.
func TestExamples(t *testing.T) {
	examples, err := filepath.Abs(filepath.Join(repoRoot, "examples"))
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, scriptParams(filepath.Join(repoRoot, "testdata", "examples"), map[string]string{"EXAMPLES": examples}))
}

// compileSchemas compiles docs/schema as published (TestGeneratedDocs
// keeps it current), every file under its $id.
func compileSchemas(t *testing.T) (manifest, agent, fleet *jsonschema.Schema) {
	t.Helper()
	c := jsonschema.NewCompiler()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "schema", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schemas in docs/schema (run make docs): %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := c.AddResource(schemaBase+filepath.Base(f), doc); err != nil {
			t.Fatal(err)
		}
	}
	return c.MustCompile(schemaBase + "manifest.json"), c.MustCompile(schemaBase + "agent.json"), c.MustCompile(schemaBase + "fleet.json")
}

// yamlDocs decodes every document of a YAML file into plain values.
func yamlDocs(data []byte) ([]any, error) {
	var docs []any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if v != nil {
			docs = append(docs, v)
		}
	}
}

// TestExampleSchemas validates every cortex-sync document under examples/
// (and the packaged default Agent file) against docs/schema, and checks
// that the loader agrees: each example folder loads, each Agent file is
// read by --config.
func TestExampleSchemas(t *testing.T) {
	manifest, agent, fleet := compileSchemas(t)
	var agents []string
	manifests := 0
	check := func(p string) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := yamlDocs(data)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return
		}
		ours := false
		for i, d := range docs {
			m, _ := d.(map[string]any)
			if m["apiVersion"] != resource.APIVersion {
				continue // data or a CI recipe, not ours
			}
			ours = true
			sch := manifest
			switch m["kind"] {
			case "Agent":
				sch = agent
				agents = append(agents, p)
			case resource.FleetKind:
				sch = fleet
			default:
				manifests++
			}
			if err := sch.Validate(d); err != nil {
				t.Errorf("%s: document %d: %v", p, i+1, err)
			}
		}
		if ours && !strings.Contains(string(data), "# yaml-language-server: $schema="+schemaBase) {
			t.Errorf("%s: no `# yaml-language-server: $schema=` line", p)
		}
	}
	err := filepath.WalkDir(filepath.Join(repoRoot, "examples"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			check(p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	check(filepath.Join(repoRoot, "packaging", "agent.yaml"))
	if manifests < 10 || len(agents) < 3 {
		t.Errorf("found %d manifests and %d Agent files; the walk missed some", manifests, len(agents))
	}

	for _, root := range exampleRoots {
		dir := filepath.Join(repoRoot, "examples", root)
		// The fleet's manifests reach shared/ above their folder: load
		// from the repository root, as a Git source would.
		tree, path := os.DirFS(dir), "."
		if top, rest, ok := strings.Cut(root, "/"); ok {
			tree, path = os.DirFS(filepath.Join(repoRoot, "examples", top)), rest
		}
		if _, err := resource.Load(tree, path, driver.Kinds()); err != nil {
			t.Errorf("examples/%s: %v", root, err)
		}
	}
	for _, a := range agents {
		var out, errs bytes.Buffer
		// Every command reads the whole file through --config, and refuses
		// a field no command has; state export touches nothing else.
		args := []string{"state", "export", "--config", a, "--state-dir", t.TempDir()}
		if code := run(context.Background(), args, nil, &out, &errs); code != 0 {
			t.Errorf("validate --config %s: exit %d: %s", a, code, errs.String())
		}
	}
}

// TestSchemasReject: the schemas say no where the loader says no.
func TestSchemasReject(t *testing.T) {
	manifest, agent, fleet := compileSchemas(t)
	for _, tc := range []struct{ name, doc string }{
		{"unknown field", "kind: File\nmetadata: {name: a}\nspec: {path: /a, content: x, colour: red}"},
		{"bad mode", "kind: File\nmetadata: {name: a}\nspec: {path: /a, content: x, mode: \"0999\"}"},
		{"content and source", "kind: File\nmetadata: {name: a}\nspec: {path: /a, content: x, source: f}"},
		{"bad name", "kind: File\nmetadata: {name: A_b}\nspec: {path: /a, content: x}"},
		{"unknown kind", "kind: Service\nmetadata: {name: a}\nspec: {}"},
		{"bad duration", "kind: Process\nmetadata: {name: a}\nspec: {command: [x], stopTimeout: 10}"},
		{"bad restart policy", "kind: Process\nmetadata: {name: a}\nspec: {command: [x], restartPolicy: Sometimes}"},
		{"bad dependency", "kind: File\nmetadata: {name: a}\nspec: {path: /a, content: x, dependsOn: [app]}"},
		{"no path", "kind: Directory\nmetadata: {name: a}\nspec: {mode: \"0755\"}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := "apiVersion: " + resource.APIVersion + "\n" + tc.doc + "\n"
			docs, err := yamlDocs([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if manifest.Validate(docs[0]) == nil {
				t.Errorf("the schema accepts\n%s", doc)
			}
			if _, err := resource.Load(os.DirFS(writeTree(t, doc)), ".", driver.Kinds()); err == nil {
				t.Errorf("the loader accepts\n%s", doc)
			}
		})
	}
	bad, _ := yamlDocs([]byte("apiVersion: " + resource.APIVersion + "\nkind: Agent\nspec: {repo: x, prunne: true}\n"))
	if agent.Validate(bad[0]) == nil {
		t.Error("the Agent schema accepts an unknown field")
	}
	for _, doc := range []string{
		"kind: Fleet\nmetadata: {name: prod}\nspec: {hosts: [{match: {}, path: [base]}]}",
		"kind: Fleet\nmetadata: {name: prod}\nspec: {hosts: [{paths: [base]}], rollout: {maxUnavailable: ten}}",
	} {
		doc = "apiVersion: " + resource.APIVersion + "\n" + doc + "\n"
		docs, _ := yamlDocs([]byte(doc))
		if fleet.Validate(docs[0]) == nil {
			t.Errorf("the Fleet schema accepts\n%s", doc)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, resource.FleetFile), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := resource.ReadFleet(os.DirFS(dir)); err == nil {
			t.Errorf("the loader accepts\n%s", doc)
		}
	}
}

func writeTree(t *testing.T, manifest string) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRecipeCommands: every cortex-sync command line in the CI recipes, the
// examples' READMEs and the install guide names a command and flags that
// exist.
func TestRecipeCommands(t *testing.T) {
	var files []string
	filepath.WalkDir(filepath.Join(repoRoot, "examples"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yml") || strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".md")) {
			files = append(files, p)
		}
		return err
	})
	files = append(files, filepath.Join(repoRoot, "docs", "install.md"), filepath.Join(repoRoot, "docs", "ci.md"))
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range commandLines(string(data)) {
			n++
			root := docRoot()
			cmd, args, err := root.Find(line)
			if err == nil && cmd == root {
				err = errors.New("no such command")
			}
			if err == nil {
				err = cmd.ParseFlags(args)
			}
			if err != nil {
				t.Errorf("%s: cortex-sync %s: %v", f, strings.Join(line, " "), err)
			}
		}
	}
	if n < 10 {
		t.Errorf("found only %d cortex-sync command lines", n)
	}
}

// commandLines finds `cortex-sync VERB …` invocations in text, joining
// continued lines, up to the first shell operator.
func commandLines(text string) [][]string {
	text = strings.ReplaceAll(text, "\\\n", " ")
	var out [][]string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		for {
			i := strings.Index(line, "cortex-sync ")
			if i < 0 {
				break
			}
			before := line[:i]
			line = line[i+len("cortex-sync "):]
			// A command, not a mention: at the start of a command in the
			// line, not inside a path or a name.
			if before != "" && !strings.ContainsAny(before[len(before)-1:], " \t`$(|;&") {
				continue
			}
			if strings.HasSuffix(before, "/") || strings.HasSuffix(before, "-") {
				continue
			}
			var args []string
			for _, f := range strings.Fields(line) {
				if strings.ContainsAny(f[:1], "|>;&#)`<") {
					break
				}
				args = append(args, strings.Trim(f, "\"'`"))
			}
			if len(args) > 0 && !strings.HasPrefix(args[0], "-") && strings.ToLower(args[0]) == args[0] && isVerb(args[0]) {
				out = append(out, args)
			}
		}
	}
	return out
}

// isVerb is true for the words that start a cortex-sync command line.
func isVerb(w string) bool {
	switch w {
	case "validate", "diff", "sync", "status", "state", "version", "completion", "run", "reconcile", "suspend", "resume", "help":
		return true
	}
	return false
}
