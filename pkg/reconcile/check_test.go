package reconcile_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"testing/fstest"
)

// TestCheckSourceChange: a prune from another source is refused only when
// it would delete something, and the refusal counts and names what.
func TestCheckSourceChange(t *testing.T) {
	old := state.Source{Type: "git", URL: "git://host/x.git"}
	moved := state.Source{Type: "git", URL: "file:///srv/x.git"}
	prune := func(ids ...string) []*diff.Change {
		var cs []*diff.Change
		for _, id := range ids {
			cs = append(cs, &diff.Change{ID: resource.ID(id), Action: diff.Delete, Reason: diff.RemovedFromGit, Prune: true})
		}
		return cs
	}
	kept := []*diff.Change{
		{ID: "File/same", Action: diff.NoOp},
		{ID: "File/gone-already", Action: diff.Forget, Reason: diff.RemovedFromGit},
		{ID: "File/unplannable", Action: diff.Delete, Reason: diff.RemovedFromGit, Prune: true, Err: errors.New("cannot look")},
		{ID: "File/absent", Action: diff.Delete, Reason: diff.DeclaredAbsent},
	}
	tests := []struct {
		name    string
		snap    state.Source
		changes []*diff.Change
		policy  reconcile.Policy
		want    string // "" for no refusal
	}{
		{name: "same source", snap: moved, changes: prune("File/a"), policy: reconcile.Policy{Prune: true}},
		{name: "new URL, nothing to delete", snap: old, changes: kept, policy: reconcile.Policy{Prune: true}},
		{name: "new URL, one to delete", snap: old, changes: append(kept, prune("File/a")...), policy: reconcile.Policy{Prune: true},
			want: `refusing to prune: the source differs from the one the snapshot records (git://host/x.git path "", now file:///srv/x.git path ""); pass --allow-source-change if the host should follow the new source: prune would delete 1 resource it does not declare (File/a)`},
		{name: "new URL, five to delete", snap: old, changes: prune("File/a", "File/b", "File/c", "File/d", "File/e"), policy: reconcile.Policy{Prune: true},
			want: "prune would delete 5 resources it does not declare (File/a, File/b, File/c and 2 more)"},
		{name: "allowed", snap: old, changes: prune("File/a"), policy: reconcile.Policy{Prune: true, AllowSourceChange: true}},
		{name: "without --prune", snap: old, changes: prune("File/a")},
		{name: "first sync", changes: kept, policy: reconcile.Policy{Prune: true}},
		{name: "no source recorded, one to delete", changes: prune("File/a"), policy: reconcile.Policy{Prune: true},
			want: `refusing to prune: the source differs from the one the snapshot records (it records none, now file:///srv/x.git path ""); pass --allow-source-change`},
	}
	set := loadSet(t, "apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: same}\nspec: {path: /same, content: x}\n")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := &state.Snapshot{Source: tt.snap, Inventory: []*state.Entry{{ID: "File/same"}}}
			err := tt.policy.Check(&diff.Plan{Changes: tt.changes}, set, snap, moved)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want == "":
			case !errors.Is(err, reconcile.ErrSourceChange) || !strings.Contains(err.Error(), tt.want):
				t.Fatalf("got %v, want ErrSourceChange saying %q", err, tt.want)
			}
		})
	}
}

func loadSet(t *testing.T, manifests string) *resource.Set {
	t.Helper()
	set, err := resource.Load(fstest.MapFS{"m.yaml": {Data: []byte(manifests)}}, ".", driver.Kinds())
	if err != nil {
		t.Fatal(err)
	}
	return set
}
