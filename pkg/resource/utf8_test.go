package resource_test

import (
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// TestNotUTF8: a manifest that is not UTF-8 text is refused at the line,
// document and column of its first such byte.
func TestNotUTF8(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"a path", "apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: a}\nspec:\n  path: \"/etc/a\xff\"\n  content: x\n",
			"m.yaml:5: document 1: byte 0xff (column 16) is not UTF-8; manifests are UTF-8 text"},
		{"in the second document", fileDoc(1, "x") + "---\nkind: File\nmetadata: {name: b}\nspec: {path: /b, content: \"\xc3(\"}\n",
			"m.yaml:9: document 2: byte 0xc3 (column 28) is not UTF-8; manifests are UTF-8 text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadWith(t, resource.Options{}, map[string]string{"m.yaml": tc.data})
			if err == nil || err.Error() != tc.want {
				t.Errorf("got %v\nwant %s", err, tc.want)
			}
		})
	}
}
