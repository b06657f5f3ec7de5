package reconcile_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// TestChangedListsEachKeyOnce: on start (no revision before) every desired
// resource is a key, and so is everything the inventory holds; a resource
// that is both, as after any earlier sync, is listed once, not once a
// side. A resource only in the inventory (gone from Git) is listed too.
func TestChangedListsEachKeyOnce(t *testing.T) {
	h := newHost(t)
	h.file("a", "/etc/a", "a")
	h.file("b", "/etc/b", "b")
	h.file("gone", "/etc/gone", "gone")
	h.run(false, reconcile.Policy{})
	if err := os.Remove(filepath.Join(h.repo, "gone.yaml")); err != nil { // gone from Git, still in the inventory
		t.Fatal(err)
	}

	d, s := h.desired(), h.engine()
	keys, _ := s.Changed(nil, d)
	slices.Sort(keys)
	if want := []resource.ID{"File/a", "File/b", "File/gone"}; !slices.Equal(keys, want) {
		t.Errorf("keys on start: %v, want %v, each once", keys, want)
	}
}

// desired loads the repository as it is now; it is closed when the test
// ends.
func (h *host) desired() *reconcile.Desired {
	h.t.Helper()
	d, err := reconcile.Load(context.Background(), &source.Dir{Dir: h.repo, Cache: state.At(filepath.Join(h.stdir, "cache"))}, resource.Options{}, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { d.Close() })
	return d
}

// engine opens a session on the host as the agent does: no desired state
// yet, the state lock taken per change. It is closed when the test ends.
func (h *host) engine() *reconcile.Session {
	h.t.Helper()
	s, err := reconcile.Open(context.Background(), reconcile.Config{Root: h.root, StateDir: h.stdir, Concurrency: 2, LockTimeout: time.Second}, nil, false)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { s.Close() })
	return s
}
