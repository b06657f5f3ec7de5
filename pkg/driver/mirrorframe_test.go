package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// TestFrameReleasesUncompared: a tree's walk leaves its files' stats to
// the goroutines that compare them, holding their source directories
// open until then. A directory's frame let go of without a comparison (a
// plan that stopped: its other directories are not compared) lets go of
// what its entries hold: an agent keeps one checkout across its passes,
// and a pass that failed must not leave descriptors behind for the next.
func TestFrameReleasesUncompared(t *testing.T) {
	repo := t.TempDir()
	for i := range 60 {
		p := filepath.Join(repo, "kb", fmt.Sprintf("d%d", i%6), fmt.Sprintf("f%d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	co, err := (&source.Dir{Dir: repo, Cache: state.At(t.TempDir())}).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	open := func() int {
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd to count descriptors by")
		}
		return len(fds)
	}
	w, ok := co.Tree.(source.StatLaterWalker)
	if !ok {
		t.Fatal("a directory's tree does not walk with stats for later")
	}
	before := open()
	f := &dirFrame{}
	if err := w.WalkStatLater("kb", func(e source.Entry) error {
		if e.Mode.IsRegular() {
			f.entries = append(f.entries, desiredEntry{Entry: e})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if held := open(); held != before+6 {
		t.Errorf("%d descriptors open once walked, %d before: want the 6 directories of the files to settle", held, before)
	}
	f.close(nil)
	if after := open(); after != before {
		t.Errorf("%d descriptors open once the frame closed uncompared, %d before", after, before)
	}
}
