package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/fsclock"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
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

// TestMirrorOwnsWhatAStoppedWriteCreated: a mirror's write stopped (by a
// SIGKILL, or a failure) after it created some entries and before its
// index recorded them, then a revision that no longer has them: they go,
// as everything cortex-sync wrote does, and a prune of the Directory
// leaves only what a user put in the mirror by hand. Both ways a tree is
// written (its ops held, or planned again as it is written), an update
// and a first write, stopped at several points.
func TestMirrorOwnsWhatAStoppedWriteCreated(t *testing.T) {
	if arg := os.Getenv(killedWriteEnv); arg != "" {
		killedWrite(t, arg) // the child: it does not come back
		return
	}
	rev1 := map[string]string{"top.md": "top\n"}
	for i := range 10 {
		rev1[fmt.Sprintf("d1/a%02d.md", i)] = fmt.Sprintf("a%d\n", i)
		rev1[fmt.Sprintf("d2/b%02d.md", i)] = fmt.Sprintf("b%d\n", i)
	}
	rev2 := maps.Clone(rev1)
	for i := range 5 {
		rev2[fmt.Sprintf("d1/a%02d.md", i)] = fmt.Sprintf("a%d, edited\n", i)
		rev2[fmt.Sprintf("new/sub/s%d.md", i)] = fmt.Sprintf("s%d\n", i)
	}
	for i := range 20 {
		rev2[fmt.Sprintf("new/n%02d.md", i)] = fmt.Sprintf("n%d\n", i)
		rev2[fmt.Sprintf("d1/c%02d.md", i)] = fmt.Sprintf("c%d\n", i)
	}
	delete(rev2, "d2/b00.md")
	rev2["link"] = "->d1/a00.md" // a symlink
	// What the host gets from rev2's write: 2 directories, a symlink, 45
	// files new and 5 rewritten.
	const created = 53
	users := map[string]string{"mine.txt": "mine\n", "d1/mine.txt": "mine too\n"}
	// A user's file where rev2 adds one: replaced (and backed up) if the
	// write got that far, else still the user's.
	const inWay, theirs = "d1/c05.md", "the user's c05\n"

	// settled: streamed, its intent log settled at every flush of a
	// batch of 4 files (as a long first sync does every 32 MiB of it).
	for _, writer := range []struct {
		name   string
		hold   int
		settle bool
	}{{"held", 1 << 20, false}, {"streamed", 0, false}, {"settled", 0, true}} {
		// Stopped early, midway and at the end; a failure (which cleans up
		// after itself) midway only.
		stops := map[bool][]int{false: {20}, true: {2, 20, created - 1}}
		for _, kill := range []bool{false, true} {
			for _, after := range stops[kill] {
				// Then the next revision has none of what rev2 added; or the
				// Directory leaves Git at once.
				for _, next := range []string{"reverted", "pruned"} {
					name := fmt.Sprintf("%s/%s/%d/%s", writer.name, map[bool]string{false: "failed", true: "killed"}[kill], after, next)
					t.Run(name, func(t *testing.T) {
						defer driver.HoldOps(writer.hold)()
						settleOften(t, writer.settle)
						h := newHost(t)
						h.repoTree(rev1)
						if rep := h.sync(); rep.Failed() {
							t.Fatalf("first sync: %+v", rep.Results[0])
						}
						for p, c := range users {
							h.write(h.hostPath("srv/kb/"+p), c)
						}
						h.write(h.hostPath("srv/kb/"+inWay), theirs)
						h.repoTree(rev2)
						h.stoppedSync(t, after, kill, writer.hold)
						// The user's file in the way is still theirs, or in a
						// backup.
						mine := maps.Clone(users)
						if b, err := os.ReadFile(h.hostPath("srv/kb/" + inWay)); err == nil && string(b) == theirs {
							mine[inWay] = theirs
						} else if !h.backedUp("srv/kb/"+inWay, theirs) {
							t.Fatalf("the user's %s was replaced and is in no backup", inWay)
						}
						if next == "reverted" {
							h.repoTree(rev1)
							if rep := h.sync(); rep.Failed() {
								t.Fatalf("sync after the stop: %+v", rep.Results[0])
							}
							h.holds(t, rev1, mine)
							if c := find(h.plan(false), "Directory/kb"); c.Action != diff.NoOp {
								t.Errorf("converged host planned %s: %+v", c.Action, c.Files)
							}
						}
						h.pruned(t, mine)
					})
				}
			}
		}
		// Two writes stopped one after the other, the second rewriting what
		// the first did: each file is as one of them left it, cortex-sync's
		// all the same. A revision without d1 removes it whole, and since
		// nothing in it is anyone else's, backs nothing up.
		t.Run(writer.name+"/twice", func(t *testing.T) {
			defer driver.HoldOps(writer.hold)()
			settleOften(t, writer.settle)
			h := newHost(t)
			h.repoTree(rev1)
			if rep := h.sync(); rep.Failed() {
				t.Fatalf("first sync: %+v", rep.Results[0])
			}
			h.repoTree(rev2)
			h.stoppedSync(t, created-1, true, writer.hold)
			again := maps.Clone(rev2)
			for i := range 5 {
				again[fmt.Sprintf("d1/a%02d.md", i)] = fmt.Sprintf("a%d, edited twice\n", i)
			}
			h.repoTree(again)
			h.stoppedSync(t, 2, true, writer.hold)
			h.holds(t, h.syncWithout(t, rev1, "d1/"), nil)
			filepath.WalkDir(filepath.Join(h.stdir, "backups"), func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					t.Errorf("backed up, though cortex-sync wrote it: %s", p)
				}
				return nil
			})
			h.pruned(t, nil)
		})
		// The Directory's first write stopped, then a revision without d2.
		for _, kill := range []bool{false, true} {
			name := fmt.Sprintf("%s/first/%s", writer.name, map[bool]string{false: "failed", true: "killed"}[kill])
			t.Run(name, func(t *testing.T) {
				defer driver.HoldOps(writer.hold)()
				settleOften(t, writer.settle)
				h := newHost(t)
				h.repoTree(rev1)
				h.stoppedSync(t, 15, kill, writer.hold)
				if writer.settle {
					h.settled(t)
				}
				h.holds(t, h.syncWithout(t, rev1, "d2/"), nil)
				h.pruned(t, nil)
			})
		}
	}
}

// killedWriteEnv carries a killed write's arguments to the child test
// process that makes it.
const killedWriteEnv = "CORTEX_SYNC_TEST_KILLED_WRITE"

// settleEnv makes the child settle its intent log as often as its parent
// (settleOften).
const settleEnv = "CORTEX_SYNC_TEST_SETTLE"

// settleOften, when on, makes the mirror's writer settle its intent log at
// every batch of 4 files, in this process and in the children the test
// starts.
func settleOften(t *testing.T, on bool) {
	if on {
		t.Setenv(settleEnv, "1")
		t.Cleanup(driver.SettleIntentsEvery(4))
	}
}

// settled checks that a stopped first write left its index saved beside
// an intent log that names only what it created since its last batch.
func (h *host) settled(t *testing.T) {
	t.Helper()
	idx, _ := filepath.Glob(filepath.Join(h.stdir, "trees", "*.idx"))
	intents, _ := filepath.Glob(filepath.Join(h.stdir, "trees", "*.idx.intent"))
	if len(idx) != 1 || len(intents) != 1 {
		t.Fatalf("after a settled write stopped: indexes %q, intent logs %q", idx, intents)
	}
	if fi, err := os.Stat(intents[0]); err != nil || fi.Size() > 2048 {
		t.Fatalf("the intent log of a settled write: %v, %d bytes", err, fi.Size())
	}
}

// repoTree makes the repository hold a Directory kb, mirrored to /srv/kb,
// whose source holds files (content "->target" makes a symlink), and a
// File beside it (so the desired set is never empty).
func (h *host) repoTree(files map[string]string) {
	h.t.Helper()
	if err := os.RemoveAll(h.repo); err != nil {
		h.t.Fatal(err)
	}
	h.write(filepath.Join(h.repo, "other.yaml"), manifest+"kind: File\nmetadata: {name: other}\nspec: {path: /srv/other, content: other}\n")
	h.write(filepath.Join(h.repo, "kb.yaml"), manifest+"kind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n")
	for p, c := range files {
		full := filepath.Join(h.repo, "kb", p)
		if target, ok := strings.CutPrefix(c, "->"); ok {
			os.MkdirAll(filepath.Dir(full), 0o755)
			if err := os.Symlink(target, full); err != nil {
				h.t.Fatal(err)
			}
			continue
		}
		h.write(full, c)
	}
}

// syncWithout syncs files but those below dir, and returns them.
func (h *host) syncWithout(t *testing.T, files map[string]string, dir string) map[string]string {
	t.Helper()
	rev := maps.Clone(files)
	maps.DeleteFunc(rev, func(p, _ string) bool { return strings.HasPrefix(p, dir) })
	h.repoTree(rev)
	if rep := h.sync(); rep.Failed() {
		t.Fatalf("sync after the stop: %+v", rep.Results[0])
	}
	return rev
}

// stoppedSync syncs the repository with the mirror's writer stopped after
// it created n entries: by an error in this process, or by a SIGKILL of a
// child test process that makes the same sync.
func (h *host) stoppedSync(t *testing.T, n int, kill bool, hold int) {
	t.Helper()
	if !kill {
		undo := driver.StopMirrorAfter(n, false)
		defer undo()
		if rep := h.sync(); !rep.Failed() {
			t.Fatalf("the sync stopped after %d entries did not fail", n)
		}
		return
	}
	arg, _ := json.Marshal(killedWriteArgs{Repo: h.repo, Root: h.root, State: h.stdir, After: n, Hold: hold})
	cmd := exec.Command(os.Args[0], "-test.run=^TestMirrorOwnsWhatAStoppedWriteCreated$", "-test.count=1")
	cmd.Env = append(os.Environ(), killedWriteEnv+"="+string(arg))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child sync was not killed (%v):\n%s", err, out)
	}
}

type killedWriteArgs struct {
	Repo, Root, State string
	After, Hold       int
}

// killedWrite is the child's part: a sync killed after its mirror created
// After entries.
func killedWrite(t *testing.T, arg string) {
	var a killedWriteArgs
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
		t.Fatal(err)
	}
	driver.HoldOps(a.Hold)
	if os.Getenv(settleEnv) != "" {
		driver.SettleIntentsEvery(4)
	}
	driver.StopMirrorAfter(a.After, true)
	h := &host{t: t, repo: a.Repo, root: a.Root, stdir: a.State}
	h.sync()
	t.Fatal("the sync ended: its mirror created fewer entries than it was to be killed after")
}

// holds checks that the mirror holds exactly the files of the source (and
// the symlinks, content "->target"), with the users' own files beside
// them, and no other entry.
func (h *host) holds(t *testing.T, files, users map[string]string) {
	t.Helper()
	want := map[string]string{}
	for _, m := range []map[string]string{files, users} {
		for p, c := range m {
			want[p] = c
			for d := path.Dir(p); d != "."; d = path.Dir(d) {
				want[d+"/"] = ""
			}
		}
	}
	got := map[string]string{}
	top := h.hostPath("srv/kb")
	filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == top {
			return err
		}
		rel, _ := filepath.Rel(top, p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			got[rel+"/"] = ""
		case d.Type()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			got[rel] = "->" + target
		default:
			b, _ := os.ReadFile(p)
			got[rel] = string(b)
		}
		return nil
	})
	for p, c := range got {
		if w, ok := want[p]; !ok {
			t.Errorf("left on the host, in no revision: %s", p)
		} else if w != c {
			t.Errorf("%s holds %q, want %q", p, c, w)
		}
	}
	for p := range want {
		if _, ok := got[p]; !ok {
			t.Errorf("missing on the host: %s", p)
		}
	}
}

// backedUp reports whether a backup run holds content at the host path p.
func (h *host) backedUp(p, content string) bool {
	runs, _ := filepath.Glob(filepath.Join(h.stdir, "backups", "*"))
	for _, run := range runs {
		if b, err := os.ReadFile(filepath.Join(run, p)); err == nil && string(b) == content {
			return true
		}
	}
	return false
}

// pruned removes the Directory from Git and checks that the prune leaves
// only the users' own files (and the directories that hold them).
func (h *host) pruned(t *testing.T, users map[string]string) {
	t.Helper()
	os.Remove(filepath.Join(h.repo, "kb.yaml"))
	if rep := h.sync(); rep.Failed() {
		t.Fatalf("prune: %+v", rep.Results)
	}
	if len(users) == 0 {
		if _, err := os.Lstat(h.hostPath("srv/kb")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after the prune /srv/kb is still there (%v)", err)
		}
		return
	}
	h.holds(t, nil, users)
}

// TestMirrorFirstWriteUnrecorded: a Directory's first write that ends
// with its index saved, and a kill before the snapshot records the
// Directory: the next sync knows what it wrote, and a revision without d2
// removes d2.
func TestMirrorFirstWriteUnrecorded(t *testing.T) {
	h := newHost(t)
	files := map[string]string{"a.md": "a\n", "d2/b.md": "b\n", "d2/c/d.md": "d\n"}
	h.repoTree(files)
	hst, set, _, done := h.engine(false)
	r := set.Get("Directory/kb")
	c, err := hst.Observe(context.Background(), r, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.ID, c.Kind, c.Desired, c.Action = r.ID(), r.Kind, r, diff.Create
	if _, err := hst.Apply(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	done() // and the snapshot is never saved
	h.holds(t, files, nil)
	h.holds(t, h.syncWithout(t, files, "d2/"), nil)
}

// TestMirrorConvergedPlanAllocations: planning a converged tree costs at
// most three allocations for each of its files (a walked file's
// ContentID, and the directories' shares of their listings, maps and
// slices, some of them pooled: a collection empties the pools, so the
// figure moves between 1.4 and 1.8), however large the tree: allocations
// are counted, not timed, the same on any machine. It was 42.6 before.
func TestMirrorConvergedPlanAllocations(t *testing.T) {
	perPlan := func(n int) float64 {
		h := newHost(t)
		h.write(filepath.Join(h.repo, "kb.yaml"), manifest+"kind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n")
		h.write(filepath.Join(h.repo, ".cortexignore"), "kb/\n") // data, not manifests
		for i := range n {
			h.write(filepath.Join(h.repo, "kb", fmt.Sprintf("d%d/f%d.md", i/50, i)), fmt.Sprintf("file %d\n", i))
		}
		// Synced twice, the second time once the filesystem's clock moved
		// past what the first wrote: nothing is left racily clean, to be
		// hashed again on every check.
		for i := range 2 {
			if rep := h.sync(); rep.Failed() {
				t.Fatalf("sync: %+v", rep.Results[0])
			}
			if i == 0 {
				fsclock.WaitPast(t, h.stdir, h.hostPath(fmt.Sprintf("srv/kb/d%d/f%d.md", (n-1)/50, n-1)))
			}
		}
		// As a command does: the source's stat cache saved as it ends.
		plan := func() *diff.Plan {
			ctx := context.Background()
			d, err := reconcile.Load(ctx, &source.Dir{Dir: h.repo, Cache: state.At(filepath.Join(h.stdir, "cache"))}, resource.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			s, err := reconcile.Open(ctx, reconcile.Config{Root: h.root, StateDir: h.stdir, Concurrency: 2, LockTimeout: time.Second}, d, false)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			return s.Plan(ctx)
		}
		if c := find(plan(), "Directory/kb"); c.Action != diff.NoOp {
			t.Fatalf("converged tree planned %s", c.Action)
		}
		return testing.AllocsPerRun(3, func() { plan() })
	}
	small, large := perPlan(200), perPlan(1200)
	if per := (large - small) / 1000; per > 3 {
		t.Errorf("a converged plan: %.1f allocations a file (%.0f for 200 files, %.0f for 1,200), want 3 at most", per, small, large)
	} else {
		t.Logf("a converged plan: %.1f allocations a file", per)
	}
}

// TestMirrorScope: a plan narrowed to the entries a watch event named
// (Env.Scope) looks at those alone, and the directories on the way: drift
// elsewhere in the tree waits for a whole look (the drift scan), and
// nothing outside the scope is taken for an entry that is not desired.
func TestMirrorScope(t *testing.T) {
	h := newHost(t)
	h.write(filepath.Join(h.repo, "kb.yaml"), manifest+"kind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n")
	for _, p := range []string{"a.md", "d/b.md", "d/c.md", "d/e/f.md", "g/h.md"} {
		h.write(filepath.Join(h.repo, "kb", p), p+"\n")
	}
	if rep := h.sync(); rep.Failed() {
		t.Fatalf("sync: %+v", rep.Results)
	}
	h.write(h.hostPath("srv/kb/a.md"), "edited\n")
	h.write(h.hostPath("srv/kb/d/b.md"), "edited\n")
	os.Remove(h.hostPath("srv/kb/d/c.md"))
	os.RemoveAll(h.hostPath("srv/kb/d/e"))
	plan := func(scope ...string) []string {
		hst, set, snap, done := h.engine(false)
		defer done()
		hst.Env.Scope = scope
		c := find(diff.Make(context.Background(), hst, set, snap, 2), "Directory/kb")
		var got []string
		for _, f := range c.Files {
			got = append(got, fmt.Sprintf("%s %s", f.Action, f.Path))
		}
		slices.Sort(got)
		return got
	}
	for _, tt := range []struct {
		scope []string
		want  []string
	}{
		{nil, []string{"create d/c.md", "create d/e", "create d/e/f.md", "update a.md", "update d/b.md"}},
		{[]string{"d/b.md"}, []string{"update d/b.md"}},
		{[]string{"d/c.md"}, []string{"create d/c.md"}},
		{[]string{"d/e"}, []string{"create d/e", "create d/e/f.md"}},
		{[]string{"d"}, []string{"create d/c.md", "create d/e", "create d/e/f.md", "update d/b.md"}},
		{[]string{"g/h.md", "a.md"}, []string{"update a.md"}},
		{[]string{"g/nothing.md"}, nil},
	} {
		if got := plan(tt.scope...); !slices.Equal(got, tt.want) {
			t.Errorf("scope %q: planned %q, want %q", tt.scope, got, tt.want)
		}
	}
}

// TestMirrorPlanHoldsFewDirectories: a plan hands its directories to the
// comparing goroutines in batches, and each directory handed over holds
// its host directory open (and its source directory, until its files
// are stated). However far the walk runs ahead, only a bounded number
// are handed over at once: a tree of many small directories planned at
// --concurrency 8 held 547 descriptors with no bound, and failed under
// a limit of 400 ("too many open files").
func TestMirrorPlanHoldsFewDirectories(t *testing.T) {
	h := newHost(t)
	h.write(filepath.Join(h.repo, "kb.yaml"), manifest+"kind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n")
	h.write(filepath.Join(h.repo, ".cortexignore"), "kb/\n")
	for i := range 2000 {
		h.write(filepath.Join(h.repo, "kb", fmt.Sprintf("d%d/f.md", i)), "x\n")
	}
	if rep := h.sync(); rep.Failed() {
		t.Fatalf("sync: %+v", rep.Results[0])
	}
	count := func() int {
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd to count descriptors by")
		}
		return len(fds)
	}
	ctx := context.Background()
	d, err := reconcile.Load(ctx, &source.Dir{Dir: h.repo, Cache: state.At(filepath.Join(h.stdir, "cache"))}, resource.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, err := reconcile.Open(ctx, reconcile.Config{Root: h.root, StateDir: h.stdir, Concurrency: 8, LockTimeout: time.Second}, d, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := count()
	var peak atomic.Int64
	stop := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			peak.Store(max(peak.Load(), int64(count())))
		}
	})
	for range 2 {
		if c := find(s.Plan(ctx), "Directory/kb"); c.Action != diff.NoOp {
			t.Errorf("converged tree planned %s", c.Action)
		}
	}
	close(stop)
	sampled.Wait()
	// 128 directories handed over, two descriptors each, and some for the
	// walk's own and the runtime's.
	if held := int(peak.Load()) - before; held > 2*128+64 {
		t.Errorf("%d descriptors open at once while planning 2,000 directories, want %d at most", held, 2*128+64)
	}
}
