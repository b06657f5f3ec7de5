package events

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"
)

// TestReasonsListsEveryReason: a reason declared and left out of Reasons
// would be refused by every notification filter that names it.
func TestReasonsListsEveryReason(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "event.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		vs, ok := node.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Reason" {
			return true
		}
		for _, name := range vs.Names {
			n++
			if !slices.Contains(Reasons, Reason(name.Name)) {
				t.Errorf("reason %s is not in Reasons", name.Name)
			}
		}
		return true
	})
	if n != len(Reasons) {
		t.Errorf("%d reasons declared, %d in Reasons", n, len(Reasons))
	}
}
