package reconcile_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
)

// TestDigestErrorStaysAnError: a resource whose desired state cannot be
// named (its tree gone from the checkout after it was loaded) is a key to
// look at again, never a digest made of the error's text; the look then
// fails with the error itself, which errors.Is still knows.
func TestDigestErrorStaysAnError(t *testing.T) {
	h := newHost(t)
	h.write(h.repo, "kb.yaml", "apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n")
	h.write(h.repo, "kb/note", "note\n")
	h.run(false, reconcile.Policy{})

	old, d := h.desired(), h.desired()
	if err := os.RemoveAll(filepath.Join(h.repo, "kb")); err != nil {
		t.Fatal(err)
	}
	s := h.engine()
	s.SetDesired(old)
	keys, _ := s.Changed(old, d)
	if !slices.Contains(keys, "Directory/kb") {
		t.Fatalf("keys %v: a resource whose digest fails is not looked at again", keys)
	}
	s.SetDesired(d)
	o := s.Converge(context.Background(), "Directory/kb")
	if o.Verdict != diff.Failed || !errors.Is(o.Err, fs.ErrNotExist) {
		t.Fatalf("%s: %v (%T); want failed with an error that is fs.ErrNotExist", o.Verdict, o.Err, o.Err)
	}
}
