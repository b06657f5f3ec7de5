package resource_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// FuzzLoad decodes and validates one manifest file beside a source file:
// never a panic, a load that succeeds gives resources with IDs in a
// complete dependency order, a load that fails names the file in every
// problem, and the same input always gives the same answer.
func FuzzLoad(f *testing.F) {
	seeds, _ := filepath.Glob("../../examples/quickstart/*.yaml")
	for _, p := range seeds {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{
		"apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: a}\nspec: {path: /etc/a, content: yes, mode: 0640}\n",
		"apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: a}\nspec: {path: /etc/a, source: files/config}\n---\n---\n",
		"apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: d}\nspec: {path: /srv/d, source: files, purge: true}\n---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: in}\nspec: {path: /srv/d/x, content: x}\n",
		"apiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: p}\nspec:\n  command: [sleep, '1']\n  dependsOn: [Command/c]\n  readinessProbe: {tcp: {address: '127.0.0.1:1'}, period: 1s}\n---\napiVersion: cortex-sync/v1alpha1\nkind: Command\nmetadata: {name: c}\nspec: {command: [true], dependsOn: [Process/p]}\n",
		"apiVersion: cortex-sync/v1alpha1\nkind: Symlink\nmetadata: {name: l, annotations: {cortex-sync/prune: disabled}}\nspec: {path: /l, target: ../x}\n",
		"a: &a [*a, *a]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n",
		"- [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]\n",
		"kind: File\nspec: {path: \"/etc/\\0x\"}\n",
		"\t\x00\xff",
		"apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: a}\nspec: {path: /etc/a, substitute: true, content: |\n    ${host.os} $${x} ${\n}\n",
		"apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: d}\nspec: {path: /srv/d, source: files, substitute: true}\n---\napiVersion: cortex-sync/v1alpha1\nkind: Command\nmetadata: {name: c}\nspec: {command: [echo, '${host.arch}'], env: {A: '${a b}'}, substitute: true}\n",
	} {
		f.Add([]byte(s))
	}
	fsys := func(data []byte) fstest.MapFS {
		return fstest.MapFS{
			"m.yaml":       {Data: data, Mode: 0o644},
			"files/config": {Data: []byte("listen: 1\n"), Mode: 0o644},
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := resource.Load(fsys(data), ".", driver.Kinds())
		again, err2 := resource.Load(fsys(data), ".", driver.Kinds())
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("two loads disagree: %v / %v", err, err2)
		}
		if err != nil {
			var p resource.Problems
			if !errors.As(err, &p) {
				t.Fatalf("not a list of problems: %T %v", err, err)
			}
			for _, e := range p {
				if !strings.HasPrefix(e.Error(), "m.yaml") {
					t.Fatalf("a problem that does not name the file: %q", e.Error())
				}
			}
			return
		}
		if set.Len() != again.Len() {
			t.Fatalf("two loads give %d and %d resources", set.Len(), again.Len())
		}
		placed := map[resource.ID]bool{}
		n := 0
		for _, level := range set.Levels() {
			for _, r := range level {
				for _, d := range set.Deps(r.ID()) {
					if !placed[d] {
						t.Fatalf("%s comes before its dependency %s", r.ID(), d)
					}
				}
				n++
			}
			for _, r := range level {
				placed[r.ID()] = true
			}
			for _, r := range level {
				if r.ID() == "" || set.Get(r.ID()) != r {
					t.Fatalf("resource without an ID, or not found by it: %q", r.ID())
				}
			}
		}
		if n != set.Len() {
			t.Fatalf("levels hold %d resources, the set %d", n, set.Len())
		}
	})
}
