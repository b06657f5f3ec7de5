package driver_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
)

// TestUnlistedDirectorySeesEveryChange: a converged check stats a
// directory's desired entries by name, without listing it, while the
// directory's stat is the one it had when it held exactly those names.
// Every change by hand is still found: a new file, a removed file, a
// renamed directory, and a new file whose directory's mtime was set back
// to what was recorded. Both ways a sync writes (a tree planned again as
// written, and held ops) record the listings.
func TestUnlistedDirectorySeesEveryChange(t *testing.T) {
	for _, hold := range []int{0, 1 << 20} {
		t.Run(map[int]string{0: "streamed", 1 << 20: "held"}[hold], func(t *testing.T) {
			defer driver.HoldOps(hold)()
			h := newHost(t)
			h.write(filepath.Join(h.repo, "kb.yaml"), manifest+"kind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb, purge: true}\n")
			for _, p := range []string{"a.md", "d/b.md", "d/e/c.md", "x/y.md"} {
				h.write(filepath.Join(h.repo, "kb", p), p+"\n")
			}
			kb := h.hostPath("srv/kb")
			// converged syncs until a check lists no directory below the
			// top: what each case starts from.
			converge := func() { t.Helper(); unlisted(t, h, kb) }
			cases := []struct {
				name  string
				edit  func()
				wants []diff.FileChange
			}{
				{"new file", func() { h.write(filepath.Join(kb, "d/stray.md"), "stray\n") },
					[]diff.FileChange{{Path: "d/stray.md", Action: diff.Delete}}},
				{"removed file", func() { os.Remove(filepath.Join(kb, "d/b.md")) },
					[]diff.FileChange{{Path: "d/b.md", Action: diff.Create}}},
				{"renamed directory", func() {
					if err := os.Rename(filepath.Join(kb, "x"), filepath.Join(kb, "x2")); err != nil {
						t.Fatal(err)
					}
				}, []diff.FileChange{{Path: "x", Action: diff.Create}, {Path: "x/y.md", Action: diff.Create}, {Path: "x2", Action: diff.Delete}}},
				{"new file, mtime set back", func() {
					dir := filepath.Join(kb, "d/e")
					fi, err := os.Stat(dir)
					if err != nil {
						t.Fatal(err)
					}
					h.write(filepath.Join(dir, "late.md"), "late\n")
					if err := os.Chtimes(dir, time.Time{}, fi.ModTime()); err != nil {
						t.Fatal(err)
					}
				}, []diff.FileChange{{Path: "d/e/late.md", Action: diff.Delete}}},
			}
			for _, tc := range cases {
				converge()
				tc.edit()
				got := map[string]diff.Action{}
				for _, f := range find(h.plan(false), "Directory/kb").Files {
					got[f.Path] = f.Action
				}
				for _, w := range tc.wants {
					if got[w.Path] != w.Action {
						t.Errorf("%s: %s planned %q, want %q (plan: %v)", tc.name, w.Path, got[w.Path], w.Action, got)
					}
				}
				if len(got) != len(tc.wants) {
					t.Errorf("%s: planned %v, want %v", tc.name, got, tc.wants)
				}
			}
		})
	}
}
