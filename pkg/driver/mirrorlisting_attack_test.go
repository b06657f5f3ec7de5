package driver_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cortex-sync/cortex-sync/internal/fsclock"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
)

// unlistedHost is a host with the Directory kb (/srv/kb from kb/ in the
// repository) synced until a converged check lists no directory below its
// top: the shortcut under attack is in force for every one of them.
func unlistedHost(t *testing.T, purge bool, files ...string) (*host, string) {
	t.Helper()
	h := newHost(t)
	p := "false"
	if purge {
		p = "true"
	}
	h.write(filepath.Join(h.repo, "kb.yaml"), manifest+"kind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb, purge: "+p+"}\n")
	for _, f := range files {
		h.write(filepath.Join(h.repo, "kb", f), f+"\n")
	}
	kb := h.hostPath("srv/kb")
	unlisted(t, h, kb)
	return h, kb
}

// unlisted syncs until a converged check of kb lists its top alone.
func unlisted(t *testing.T, h *host, kb string) {
	t.Helper()
	for range 3 {
		if rep := h.sync(); rep.Failed() {
			t.Fatalf("sync: %+v", rep.Results[0])
		}
		fsclock.WaitPast(t, h.stdir, filepath.Join(kb, "d"))
		before := driver.HostListings()
		c := find(h.plan(false), "Directory/kb")
		if c.Action != diff.NoOp {
			t.Fatalf("converged tree planned %s: %+v", c.Action, c.Files)
		}
		if driver.HostListings()-before == 1 { // the top alone
			return
		}
	}
	t.Fatal("a converged check still lists the tree's directories")
}

// planned is the Directory kb's planned changes, by path.
func planned(t *testing.T, h *host) map[string]diff.Action {
	t.Helper()
	got := map[string]diff.Action{}
	for _, f := range find(h.plan(false), "Directory/kb").Files {
		got[f.Path] = f.Action
	}
	return got
}

// hostNames are the names in dir on the host, sorted.
func hostNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestAttackNamesDigestCollides (finding): the digest of a directory's
// desired names is a sum of each name's FNV-1a, and FNV-1a's last step is
// linear in the last byte: {v1, v2} and {v0, v3} digest the same (as any
// {x, x^3} and {x^1, x^2} in the last byte do). A commit that renames
// d/v1 and d/v2 to d/v0 and d/v3 leaves d's recorded digest standing:
// the converged check does not list d, creates v0 and v3, never prunes v1
// and v2, and forgets them from the index (so no later check prunes
// them either).
func TestAttackNamesDigestCollides(t *testing.T) {
	for _, purge := range []bool{false, true} {
		t.Run(map[bool]string{false: "purge false", true: "purge true"}[purge], func(t *testing.T) {
			h, kb := unlistedHost(t, purge, "a.md", "d/keep.md", "d/v1", "d/v2")
			for _, f := range []string{"v1", "v2"} {
				if err := os.Remove(filepath.Join(h.repo, "kb/d", f)); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range []string{"v0", "v3"} {
				h.write(filepath.Join(h.repo, "kb/d", f), f+"\n")
			}
			got := planned(t, h)
			want := map[string]diff.Action{"d/v0": diff.Create, "d/v3": diff.Create, "d/v1": diff.Delete, "d/v2": diff.Delete}
			for p, a := range want {
				if got[p] != a {
					t.Errorf("%s planned %q, want %q (plan: %v)", p, got[p], a, got)
				}
			}
			if rep := h.sync(); rep.Failed() {
				t.Fatalf("sync: %+v", rep.Results[0])
			}
			if names, want := hostNames(t, filepath.Join(kb, "d")), []string{"keep.md", "v0", "v3"}; !slices.Equal(names, want) {
				t.Errorf("after the sync the host's d holds %v, want %v", names, want)
			}
		})
	}
}

// TestAttackUnmanagedEmptyDirectoryKept (finding): with purge false, an
// empty directory made by hand in the tree is not cortex-sync's and stays.
// A sync weighs what is inside it (hostOnly), and that comparison asked
// to have the directory listed again after the writes and recorded as
// holding exactly its desired names, of which it has none: the index then
// records the user's directory as one cortex-sync wrote, and the next
// sync deletes it as removed from Git.
func TestAttackUnmanagedEmptyDirectoryKept(t *testing.T) {
	for _, where := range []string{"u", "d/u"} {
		t.Run(where, func(t *testing.T) {
			defer driver.HoldOps(0)() // planned again as written
			h, kb := unlistedHost(t, false, "a.md", "d/keep.md")
			if err := os.Mkdir(filepath.Join(kb, where), 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				// A commit, so that each sync writes the tree.
				h.write(filepath.Join(h.repo, "kb", fmt.Sprintf("d/new%d.md", i)), "new\n")
				if got := planned(t, h); len(got) != 1 {
					t.Errorf("check %d planned %v, want the new file alone (purge false)", i, got)
				}
				if rep := h.sync(); rep.Failed() {
					t.Fatalf("sync: %+v", rep.Results[0])
				}
				if _, err := os.Lstat(filepath.Join(kb, where)); err != nil {
					t.Fatalf("after sync %d: %v (purge false: a directory made by hand stays)", i, err)
				}
			}
		})
	}
}

// TestAttackUnlistedScenarios: changes a converged check must still find
// while the directories they land in have the stats recorded with their
// names (none of these found a defect: each is here so that it stays so).
func TestAttackUnlistedScenarios(t *testing.T) {
	files := []string{"a.md", "d/b.md", "d/e/c.md", "d/l"}
	cases := []struct {
		name   string
		edit   func(h *host, kb string)
		recall bool // status without a source also finds it
		wants  map[string]diff.Action
	}{
		{"temp file left by hand", func(h *host, kb string) {
			h.write(filepath.Join(kb, "d/e/.cortex-sync-1-1-c.md"), "half")
		}, true, map[string]diff.Action{"d/e/.cortex-sync-1-1-c.md": diff.Delete}},
		{"directory made again with the same names and one more", func(h *host, kb string) {
			if err := os.RemoveAll(filepath.Join(kb, "d/e")); err != nil {
				t.Fatal(err)
			}
			h.write(filepath.Join(kb, "d/e/c.md"), "d/e/c.md\n")
			h.write(filepath.Join(kb, "d/e/more.md"), "more\n")
		}, true, map[string]diff.Action{"d/e/more.md": diff.Delete}},
		{"name differing in case", func(h *host, kb string) {
			h.write(filepath.Join(kb, "d/B.md"), "d/b.md\n")
		}, true, map[string]diff.Action{"d/B.md": diff.Delete}},
		{"name not UTF-8", func(h *host, kb string) {
			h.write(filepath.Join(kb, "d/\xff.md"), "x\n")
		}, true, map[string]diff.Action{"d/\xff.md": diff.Delete}},
		{"symlink made a file", func(h *host, kb string) {
			os.Remove(filepath.Join(kb, "d/l"))
			h.write(filepath.Join(kb, "d/l"), "../a.md")
		}, false, map[string]diff.Action{"d/l": diff.Update}},
		{"file removed in Git", func(h *host, kb string) {
			os.Remove(filepath.Join(h.repo, "kb/d/b.md"))
		}, false, map[string]diff.Action{"d/b.md": diff.Delete}},
		{"file renamed in Git", func(h *host, kb string) {
			os.Rename(filepath.Join(h.repo, "kb/d/b.md"), filepath.Join(h.repo, "kb/d/b2.md"))
		}, false, map[string]diff.Action{"d/b.md": diff.Delete, "d/b2.md": diff.Create}},
		{"file made a directory in Git", func(h *host, kb string) {
			os.Remove(filepath.Join(h.repo, "kb/d/b.md"))
			h.write(filepath.Join(h.repo, "kb/d/b.md/in.md"), "in\n")
		}, false, map[string]diff.Action{"d/b.md": diff.Update, "d/b.md/in.md": diff.Create}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, kb := newHost(t), ""
			h.write(filepath.Join(h.repo, "kb.yaml"), manifest+"kind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb, purge: true}\n")
			for _, f := range files {
				if f == "d/l" {
					if err := os.Symlink("../a.md", filepath.Join(h.repo, "kb", f)); err != nil {
						t.Fatal(err)
					}
					continue
				}
				h.write(filepath.Join(h.repo, "kb", f), f+"\n")
			}
			kb = h.hostPath("srv/kb")
			unlisted(t, h, kb)
			tc.edit(h, kb)
			for _, recall := range []bool{false, true} {
				if recall && !tc.recall {
					continue
				}
				got := map[string]diff.Action{}
				for _, f := range find(h.plan(recall), "Directory/kb").Files {
					got[f.Path] = f.Action
				}
				if len(got) != len(tc.wants) {
					t.Errorf("recalled %v: planned %v, want %v", recall, got, tc.wants)
				}
				for p, a := range tc.wants {
					if got[p] != a {
						t.Errorf("recalled %v: %s planned %q, want %q (plan: %v)", recall, p, got[p], a, got)
					}
				}
			}
		})
	}
}

// TestAttackStoppedSyncThenUnlisted: a sync stopped part way through a
// commit (by an error, or by a SIGKILL of the process, after its writer
// created two entries), in both ways a sync writes, leaves the converged
// check to find the rest, and the next sync ends with the host holding
// exactly the commit.
func TestAttackStoppedSyncThenUnlisted(t *testing.T) {
	for _, kill := range []bool{false, true} {
		for _, hold := range []int{0, 1 << 20} {
			t.Run(fmt.Sprintf("kill=%v/hold=%d", kill, hold), func(t *testing.T) {
				defer driver.HoldOps(hold)()
				h, kb := unlistedHost(t, false, "a.md", "d/b.md", "d/e/c.md")
				os.Remove(filepath.Join(h.repo, "kb/d/b.md"))
				for _, f := range []string{"d/e/n1.md", "d/e/n2.md", "d/e/n3.md", "d/n4.md"} {
					h.write(filepath.Join(h.repo, "kb", f), f+"\n")
				}
				h.stoppedSync(t, 2, kill, hold)
				if got := planned(t, h); len(got) == 0 {
					t.Error("after the stopped sync a check planned nothing, want what is left of the commit")
				}
				if rep := h.sync(); rep.Failed() {
					t.Fatalf("sync: %+v", rep.Results[0])
				}
				if names, want := hostNames(t, filepath.Join(kb, "d")), []string{"e", "n4.md"}; !slices.Equal(names, want) {
					t.Errorf("d holds %v, want %v", names, want)
				}
				if names, want := hostNames(t, filepath.Join(kb, "d/e")), []string{"c.md", "n1.md", "n2.md", "n3.md"}; !slices.Equal(names, want) {
					t.Errorf("d/e holds %v, want %v", names, want)
				}
				if got := planned(t, h); len(got) != 0 {
					t.Errorf("converged check planned %v", got)
				}
			})
		}
	}
}
