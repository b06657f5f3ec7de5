package driver_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// --verify reads every mirrored file, even one whose stat is the one its
// index entry records: by the XXH3 recorded when there is one, else by
// the SHA-256 (an index written before XXH3 was), and sync --verify
// records the XXH3 such an entry lacks. An edit that keeps a file's stat
// takes a clock set back here; the index is made to record the edited
// file's stat instead, which is what --verify is for: a stat that says
// nothing changed, and a content that did. Without --verify the stat is
// trusted.
func TestMirrorVerify(t *testing.T) {
	h := newHost(t)
	h.write(h.repo+"/kb.yaml", manifest+"kind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n")
	h.write(h.repo+"/kb/a.md", "alpha\n")
	h.write(h.repo+"/kb/d/b.md", "beta\n")
	if rep := h.sync(); rep.Failed() {
		t.Fatalf("sync: %+v", rep.Results[0])
	}
	idxFile := state.At(h.stdir).File("trees/Directory.kb.idx")
	loaded := func() *index.Index {
		t.Helper()
		x, err := index.Load(idxFile)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for p, want := range map[string]string{"a.md": "alpha\n", "d/b.md": "beta\n"} {
		if e := loaded().Get(p); e == nil || e.XXH3 != xxh3.HashString128(want).Bytes() {
			t.Fatalf("%s recorded %+v, want the XXH3 of what was written", p, e)
		}
	}
	plan := func(verify bool) diff.Action {
		t.Helper()
		s := h.session(false, false)
		s.Env.Verify = verify
		return find(s.Plan(context.Background()), "Directory/kb").Action
	}
	if a, b := plan(false), plan(true); a != diff.NoOp || b != diff.NoOp {
		t.Fatalf("converged: planned %s, with --verify %s", a, b)
	}
	// a.md's entry made to record the stat it has now, its digests left
	// as they were (its XXH3 dropped: as an index of before XXH3 was).
	record := func(withXXH3 bool) {
		t.Helper()
		r, err := hostfs.Open(h.root, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		d, err := r.OpenDir("/srv/kb")
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		st, err := d.Lstat("a.md")
		if err != nil {
			t.Fatal(err)
		}
		x := loaded()
		e := *x.Get("a.md")
		e.Stat = st
		if !withXXH3 {
			e.XXH3 = [16]byte{}
		}
		x.Set("a.md", &e)
		if err := x.Save(idxFile); err != nil {
			t.Fatal(err)
		}
		// Saved well after the file was written, as an index usually is:
		// the stat is not racily clean, and trusted. (The log's time: the
		// log names its base by the base's.)
		later := time.Now().Add(time.Hour)
		if err := os.Chtimes(idxFile.Path()+".log", later, later); err != nil {
			t.Fatal(err)
		}
	}
	for _, withXXH3 := range []bool{true, false} {
		h.write(h.hostPath("srv/kb/a.md"), "ALPHA\n") // another content of its size
		record(withXXH3)
		if a, b := plan(false), plan(true); a != diff.NoOp || b != diff.Update {
			t.Errorf("edited, the stat recorded (XXH3 recorded: %v): planned %s, with --verify %s; want no-op, update", withXXH3, a, b)
		}
	}
	// Put back, and recorded as an index of before XXH3: read by its
	// SHA-256, a.md is converged, and sync --verify records its XXH3.
	h.write(h.hostPath("srv/kb/a.md"), "alpha\n")
	record(false)
	if b := plan(true); b != diff.NoOp {
		t.Fatalf("put back: planned %s with --verify", b)
	}
	s := h.session(false, true)
	s.Env.Verify = true
	s.Policy = reconcile.Policy{Prune: true, WaitTimeout: time.Second}
	if rep, err := s.Sync(context.Background(), s.Plan(context.Background()), state.Retention{}); err != nil || rep.Failed() {
		t.Fatalf("sync --verify: %v %+v", err, rep)
	}
	s.Close()
	if e := loaded().Get("a.md"); e == nil || e.XXH3 != xxh3.HashString128("alpha\n").Bytes() {
		t.Fatalf("after sync --verify a.md recorded %+v", e)
	}
}
