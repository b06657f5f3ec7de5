package reconcile_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
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

	ctx := context.Background()
	load := func() *reconcile.Desired {
		d, err := reconcile.Load(ctx, &source.Dir{Dir: h.repo, Cache: state.At(filepath.Join(h.stdir, "cache"))}, resource.Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	old, d := load(), load()
	if err := os.RemoveAll(filepath.Join(h.repo, "kb")); err != nil {
		t.Fatal(err)
	}
	s, err := reconcile.Open(ctx, reconcile.Config{Root: h.root, StateDir: h.stdir, Concurrency: 2, LockTimeout: time.Second}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetDesired(old)
	keys, _ := s.Changed(old, d)
	if !slices.Contains(keys, "Directory/kb") {
		t.Fatalf("keys %v: a resource whose digest fails is not looked at again", keys)
	}
	s.SetDesired(d)
	o := s.Converge(ctx, "Directory/kb")
	if o.Verdict != diff.Failed || !errors.Is(o.Err, fs.ErrNotExist) {
		t.Fatalf("%s: %v (%T); want failed with an error that is fs.ErrNotExist", o.Verdict, o.Err, o.Err)
	}
}
