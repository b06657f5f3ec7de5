package state

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/tempwriter"
)

// TestHelperTempWriter is no test: tempwriter runs it as a writer.
func TestHelperTempWriter(t *testing.T) { tempwriter.Helper() }

// TestLiveWritersTempIsNoFinding: a temp file whose writer runs (the
// agent's, saving state.json while `state check` looks, or a source stat
// cache's, written outside the lock) is no finding, and neither the lock
// nor repair deletes it; once its writer is killed it is a temp file left
// by an interrupted write, reported and repaired.
func TestLiveWritersTempIsNoFinding(t *testing.T) {
	d, _ := saved(t, 1)
	if err := os.MkdirAll(d.Sub("cache").Path(), 0o700); err != nil {
		t.Fatal(err)
	}
	writers := []*tempwriter.Writer{
		tempwriter.Start(t, "TestHelperTempWriter", d.Path(), "state.json"),
		tempwriter.Start(t, "TestHelperTempWriter", d.Sub("cache").Path(), "dir-0123.idx"),
	}
	problems := func() []Finding {
		var bad []Finding
		for _, f := range d.Check() {
			if !f.OK {
				bad = append(bad, f)
			}
		}
		return bad
	}
	if bad := problems(); len(bad) != 0 {
		t.Fatalf("a live writer's temp file is a finding: %+v", bad)
	}
	l, err := d.Lock(context.Background(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	done, err := d.Repair(d.Check())
	l.Unlock()
	if err != nil || len(done) != 0 {
		t.Fatalf("repair: %+v, %v", done, err)
	}
	if n, err := d.RemoveTemps(); n != 0 || err != nil {
		t.Fatalf("RemoveTemps = %d, %v; want none removed", n, err)
	}
	for _, w := range writers {
		if _, err := os.Lstat(w.Temp); err != nil {
			t.Fatalf("a live writer's temp file was removed: %v", err)
		}
	}

	for _, w := range writers {
		w.Kill()
	}
	bad := problems()
	if len(bad) != 2 {
		t.Fatalf("findings after the writers were killed: %+v, want their 2 temp files", bad)
	}
	for i, f := range bad {
		if !strings.Contains(f.What, "interrupted write") || !f.Repairable {
			t.Errorf("finding %d: %+v", i, f)
		}
	}
	if done, err := d.Repair(bad); err != nil || len(done) != 2 {
		t.Fatalf("repair: %+v, %v", done, err)
	}
	for _, w := range writers {
		if _, err := os.Lstat(w.Temp); err == nil {
			t.Errorf("%s survived repair", filepath.Base(w.Temp))
		}
	}
}

// TestLockSweepsKilledWritersTemps: the lock, taken by every sync, removes
// what a killed writer left, and not what a live one is writing.
func TestLockSweepsKilledWritersTemps(t *testing.T) {
	d, _ := saved(t, 1)
	live := tempwriter.Start(t, "TestHelperTempWriter", d.Path(), "state.json")
	killed := tempwriter.Start(t, "TestHelperTempWriter", d.Path(), "state.json")
	killed.Kill()
	l, err := d.Lock(context.Background(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock()
	if _, err := os.Lstat(live.Temp); err != nil {
		t.Errorf("the live writer's temp file: %v", err)
	}
	if _, err := os.Lstat(killed.Temp); err == nil {
		t.Errorf("the killed writer's temp file survived the lock")
	}
}
