package driver_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
)

// TestMirrorWrittenAsPlanned: a tree with more changes than a plan holds
// is planned again as it is written, directory by directory; the host
// ends as it does when the ops are held, and the same things are backed up.
func TestMirrorWrittenAsPlanned(t *testing.T) {
	for _, hold := range []int{0, 1 << 20} {
		t.Run(map[int]string{0: "streamed", 1 << 20: "held"}[hold], func(t *testing.T) {
			defer driver.HoldOps(hold)()
			h := newHost(t)
			h.write(filepath.Join(h.repo, "kb.yaml"), manifest+"kind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb, purge: true}\n")
			for _, p := range []string{"a.md", "d/b.md", "d/e/c.md", "gone.md", "f/x.md"} {
				h.write(filepath.Join(h.repo, "kb", p), p+"\n")
			}
			if rep := h.sync(); rep.Failed() {
				t.Fatalf("first sync: %+v", rep.Results[0])
			}
			// Git: one file edited, one removed, a file becomes a
			// directory and a directory a file.
			h.write(filepath.Join(h.repo, "kb/a.md"), "a, edited\n")
			os.Remove(filepath.Join(h.repo, "kb/gone.md"))
			os.Remove(filepath.Join(h.repo, "kb/d/b.md"))
			h.write(filepath.Join(h.repo, "kb/d/b.md/new.md"), "new\n")
			os.RemoveAll(filepath.Join(h.repo, "kb/f"))
			h.write(filepath.Join(h.repo, "kb/f"), "f is a file\n")
			// The host: a stray file (purged), and a file in the way of a
			// new directory, not cortex-sync's (backed up).
			h.write(h.hostPath("srv/kb/stray.md"), "stray\n")
			h.write(filepath.Join(h.repo, "kb/n/m.md"), "m\n")
			h.write(h.hostPath("srv/kb/n"), "in the way\n")

			if c := find(h.plan(false), "Directory/kb"); c.Action != diff.Update || len(c.Files) == 0 {
				t.Fatalf("planned %s with %d files", c.Action, len(c.Files))
			}
			rep := h.sync()
			if rep.Failed() {
				t.Fatalf("sync: %+v", rep.Results[0])
			}
			want := map[string]string{
				"a.md": "a, edited\n", "d/b.md/new.md": "new\n", "d/e/c.md": "d/e/c.md\n",
				"f": "f is a file\n", "n/m.md": "m\n",
			}
			got := map[string]string{}
			filepath.WalkDir(h.hostPath("srv/kb"), func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					b, _ := os.ReadFile(p)
					rel, _ := filepath.Rel(h.hostPath("srv/kb"), p)
					got[filepath.ToSlash(rel)] = string(b)
				}
				return nil
			})
			if len(got) != len(want) {
				t.Errorf("host holds %v, want %v", got, want)
			}
			for p, data := range want {
				if got[p] != data {
					t.Errorf("%s holds %q, want %q", p, got[p], data)
				}
			}
			backups := 0
			filepath.WalkDir(filepath.Join(h.stdir, "backups"), func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() && (strings.HasSuffix(p, "/n") || strings.HasSuffix(p, "/stray.md")) {
					backups++
				}
				return nil
			})
			if backups != 2 {
				t.Errorf("%d of the 2 files not cortex-sync's backed up", backups)
			}
			if c := find(h.plan(false), "Directory/kb"); c.Pending() || c.Err != nil {
				t.Errorf("after sync, still %s (%s) %v: %+v", c.Action, c.Reason, c.Err, c.Files)
			}
		})
	}
}

// TestMirrorChangesCounted: a plan made only to be applied counts a large
// tree's changes by kind; the counts are those of the listed plan.
func TestMirrorChangesCounted(t *testing.T) {
	defer driver.HoldOps(2)()
	h := newHost(t)
	h.write(filepath.Join(h.repo, "kb.yaml"), manifest+"kind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb, purge: true}\n")
	for _, p := range []string{"a.md", "b.md", "d/c.md", "d/e.md"} {
		h.write(filepath.Join(h.repo, "kb", p), p+"\n")
	}
	if rep := h.sync(); rep.Failed() {
		t.Fatalf("first sync: %+v", rep.Results[0])
	}
	h.write(filepath.Join(h.repo, "kb/a.md"), "a, edited\n")
	h.write(filepath.Join(h.repo, "kb/new.md"), "new\n")
	h.write(filepath.Join(h.repo, "kb/d/new.md"), "new\n")
	os.Remove(h.hostPath("srv/kb/d/c.md"))
	h.write(h.hostPath("srv/kb/stray.md"), "stray\n")
	plan := func(count bool) *diff.Change {
		hst, set, snap, done := h.engine(false)
		defer done()
		hst.Env.CountFiles = count
		return find(diff.Make(context.Background(), hst, set, snap, 2), "Directory/kb")
	}
	listed, counted := plan(false), plan(true)
	if len(listed.Files) != 5 || len(counted.Files) != 4 {
		t.Fatalf("listed %d files, counted in %d entries; want 5 listed, 4 counted", len(listed.Files), len(counted.Files))
	}
	if listed.FileCount() != counted.FileCount() || listed.Drifted != counted.Drifted || listed.Reason != counted.Reason || listed.Drifted != 1 {
		t.Errorf("counted %d files, %d drifted, %s; listed %d, %d, %s", counted.FileCount(), counted.Drifted, counted.Reason, listed.FileCount(), listed.Drifted, listed.Reason)
	}
}

// TestMirrorNameNotUTF8: a Linux file name is any bytes but '/' and NUL. A
// directory source's file whose name is not UTF-8 is mirrored as a Git
// source's is, and a converged host plans nothing.
func TestMirrorNameNotUTF8(t *testing.T) {
	h := newHost(t)
	h.write(filepath.Join(h.repo, "kb.yaml"), manifest+"kind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n")
	name := "caf\xe9.md" // Latin-1
	h.write(filepath.Join(h.repo, "kb", "d\xff", name), "latin-1\n")
	if rep := h.sync(); rep.Failed() {
		t.Fatalf("sync: %+v", rep.Results[0])
	}
	if b, err := os.ReadFile(h.hostPath(filepath.Join("srv/kb", "d\xff", name))); err != nil || string(b) != "latin-1\n" {
		t.Fatalf("mirrored: %q, %v", b, err)
	}
	if c := find(h.plan(false), "Directory/kb"); c.Action != diff.NoOp {
		t.Fatalf("converged host planned %s: %+v", c.Action, c.Files)
	}
}
