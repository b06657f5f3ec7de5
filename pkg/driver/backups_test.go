package driver_test

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// backupsHost is a root with /srv/kb in it, a state dir, and a victim
// directory outside both that nothing may ever write to.
type backupsHost struct {
	t                   *testing.T
	root, stdir, victim string
	r                   *hostfs.Root
	b                   *driver.Backups
}

func newBackupsHost(t *testing.T) *backupsHost {
	h := &backupsHost{t: t, root: t.TempDir(), stdir: t.TempDir(), victim: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(h.root, "srv", "kb"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := hostfs.Open(h.root, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	h.r, h.b = r, &driver.Backups{State: state.At(h.stdir)}
	return h
}

// save backs up the in-root path p.
func (h *backupsHost) save(p string) (string, error) {
	h.t.Helper()
	d, base, err := h.r.Parent(p, false)
	if err != nil {
		h.t.Fatal(err)
	}
	defer d.Close()
	return h.b.Save(d, base)
}

func (h *backupsHost) mustSave(p string) string {
	h.t.Helper()
	dst, err := h.save(p)
	if err != nil {
		h.t.Fatal(err)
	}
	return dst
}

// untouched fails the test when anything was written in the victim.
func (h *backupsHost) untouched() {
	h.t.Helper()
	entries, err := os.ReadDir(h.victim)
	if err != nil {
		h.t.Fatal(err)
	}
	if len(entries) > 0 {
		h.t.Fatalf("written outside the state dir, in %s: %v", h.victim, entries)
	}
}

// copies lists the backups of in-root path p, by content.
func (h *backupsHost) copies(p string) []string {
	h.t.Helper()
	matches, _ := filepath.Glob(filepath.Join(h.stdir, "backups", "*", p))
	var out []string
	for _, m := range matches {
		if fi, err := os.Lstat(m); err == nil && fi.Mode().IsRegular() {
			data, _ := os.ReadFile(m)
			out = append(out, string(data))
		}
	}
	sort.Strings(out)
	return out
}

func (h *backupsHost) write(p, content string) {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(h.root, p), []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// TestBackupsNeverWriteThroughABackedUpLink plays issue 18's attack on one
// Backups (as the agent keeps one for its life): /srv/kb is a symlink to a
// victim directory when it is backed up; later a file at /srv/kb/f1.txt is.
// The second copy must not go through the first.
func TestBackupsNeverWriteThroughABackedUpLink(t *testing.T) {
	h := newBackupsHost(t)
	kb := filepath.Join(h.root, "srv", "kb")
	os.RemoveAll(kb)
	if err := os.Symlink(h.victim, kb); err != nil {
		t.Fatal(err)
	}
	link := h.mustSave("/srv/kb")
	if target, err := os.Readlink(link); err != nil || target != h.victim {
		t.Fatalf("the link was backed up as %q, %v", target, err)
	}
	os.Remove(kb)
	os.Mkdir(kb, 0o755)
	h.write("/srv/kb/f1.txt", "* * * * * root touch /tmp/pwned\n")
	dst := h.mustSave("/srv/kb/f1.txt")
	h.untouched()
	if !strings.HasPrefix(dst, filepath.Join(h.stdir, "backups")+"/") {
		t.Fatalf("copied to %s, outside the backups", dst)
	}
	if got := h.copies("srv/kb/f1.txt"); len(got) != 1 {
		t.Fatalf("copies of f1.txt: %q", got)
	}
	// The link again, as a second swap would back it up: no "file exists".
	os.RemoveAll(kb)
	os.Symlink(h.victim, kb)
	h.mustSave("/srv/kb")
	h.untouched()
}

// TestBackupsOneCopyPerOverwrite: three overwrites of one file in one
// session leave three copies, none overwritten.
func TestBackupsOneCopyPerOverwrite(t *testing.T) {
	h := newBackupsHost(t)
	for _, c := range []string{"edit 1\n", "edit 2\n", "edit 3\n"} {
		h.write("/srv/kb/f1.txt", c)
		h.mustSave("/srv/kb/f1.txt")
	}
	got := h.copies("srv/kb/f1.txt")
	if want := []string{"edit 1\n", "edit 2\n", "edit 3\n"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("copies: %q, want %q", got, want)
	}
	// A file next to them goes into the run in use: runs are made only
	// when a path is taken.
	h.write("/srv/kb/other", "other\n")
	h.mustSave("/srv/kb/other")
	runs, err := state.At(h.stdir).Backups()
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3", len(runs))
	}
}

// TestBackupsRefusePlantedLinks: symlinks put into the state dir's backups
// are never followed: a run replaced by one is left for a new run, a
// backups/ that is one is refused, and neither retention nor the listing
// goes through them.
func TestBackupsRefusePlantedLinks(t *testing.T) {
	h := newBackupsHost(t)
	h.write("/srv/kb/f1.txt", "one\n")
	first := h.mustSave("/srv/kb/f1.txt")
	run := strings.TrimSuffix(first, "/srv/kb/f1.txt")
	if err := os.RemoveAll(run); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(h.victim, run); err != nil {
		t.Fatal(err)
	}
	h.write("/srv/kb/f1.txt", "two\n")
	h.mustSave("/srv/kb/f1.txt")
	h.untouched()

	// An old run's name pointing at the victim, which holds what looks
	// like old runs: retention deletes neither it nor through it.
	os.Mkdir(filepath.Join(h.victim, "20200101T000000.000000000Z"), 0o700)
	old := filepath.Join(h.stdir, "backups", "20200102T000000.000000000Z")
	if err := os.Symlink(h.victim, old); err != nil {
		t.Fatal(err)
	}
	sd := state.At(h.stdir)
	if _, err := sd.PruneBackups(state.Retention{Keep: 0, MaxAge: 1}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.victim, "20200101T000000.000000000Z")); err != nil {
		t.Fatalf("retention went through a planted link: %v", err)
	}
	os.Remove(filepath.Join(h.victim, "20200101T000000.000000000Z"))

	backups := filepath.Join(h.stdir, "backups")
	if err := os.RemoveAll(backups); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(h.victim, backups); err != nil {
		t.Fatal(err)
	}
	h.write("/srv/kb/f1.txt", "three\n")
	if _, err := h.save("/srv/kb/f1.txt"); !errors.Is(err, state.ErrSymlink) {
		t.Fatalf("a backups dir that is a symlink: %v, want an error wrapping ErrSymlink", err)
	}
	h.untouched()
	if runs, err := sd.Backups(); err == nil || len(runs) > 0 {
		t.Fatalf("listing through a planted backups link: %v, %v", runs, err)
	}
}

// TestBackupsCloseWhatTheyOpen: copies at nested paths leave no
// descriptor open (one left per copy, and one closed twice, once broke
// the agent's other files under churn).
func TestBackupsCloseWhatTheyOpen(t *testing.T) {
	h := newBackupsHost(t)
	h.write("/srv/kb/f1.txt", "one\n")
	h.mustSave("/srv/kb/f1.txt")
	before := openFDs(t)
	for range 20 {
		h.mustSave("/srv/kb/f1.txt")
	}
	// More, not different: a descriptor the runtime or another test's
	// leftovers close meanwhile is no leak; one left per copy is 20 more.
	if after := openFDs(t); after > before {
		t.Fatalf("%d descriptors open after 20 copies, %d before", after, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(fds)
}

// TestBackupNeverCopiesTheStateDir: a state dir inside the root (the
// default layout, /var/lib/cortex-sync under /) is never backed up, nor a
// directory that holds it: a copy of the backups into themselves grew
// level inside level until the descriptors ran out.
func TestBackupNeverCopiesTheStateDir(t *testing.T) {
	root := t.TempDir()
	stdir := filepath.Join(root, "var", "lib", "cs")
	if err := os.MkdirAll(filepath.Join(stdir, "backups"), 0o700); err != nil {
		t.Fatal(err)
	}
	r, err := hostfs.Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Reserve("/var/lib/cs")
	b := &driver.Backups{State: state.At(stdir)}
	for _, p := range []string{"/var/lib", "/var/lib/cs", "/var"} {
		d, base, err := r.Parent(p, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Save(d, base); !errors.Is(err, hostfs.ErrReserved) {
			t.Errorf("back up %s: got %v, want ErrReserved", p, err)
		}
		d.Close()
	}
	runs, _ := os.ReadDir(filepath.Join(stdir, "backups"))
	if len(runs) != 0 {
		t.Errorf("backups made of the state dir: %v", runs)
	}
}
