//go:build crash

package crashtest

import (
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

var (
	kills     = flag.Int("crash.kills", 30, "SIGKILLs per scenario")
	seed      = flag.Uint64("crash.seed", 1, "seed of the kill moments and of the generated contents")
	dirFiles  = flag.Int("crash.dirfiles", 10000, "files in the mirrored Directory")
	fileCount = flag.Int("crash.files", 2000, "File manifests")
)

// version is one desired state: a source directory and what the host holds
// once it is applied (in-root path to SHA-256).
type version struct {
	name string
	repo string
	host map[string]string
	// owned checks, after a converged sync, that the state records every
	// file cortex-sync created.
	owned func(s *sandbox, snap *state.Snapshot, users map[string]string) error
}

// body is the generated content of file id in version ver: most small,
// every 250th 256 KiB so a kill can land inside a write.
func body(id, ver int) string {
	if ver == 2 && id%2 == 1 {
		ver = 1 // half the files change between the versions
	}
	lines := 1 + int(rand.New(rand.NewPCG(*seed, uint64(id))).IntN(60))
	if id%250 == 0 {
		lines = 4096
	}
	var b strings.Builder
	for l := range lines {
		fmt.Fprintf(&b, "file %d version %d line %d: the quick brown fox\n", id, ver, l)
	}
	return b.String()
}

// ids are the files of a version: version 2 drops the first 5% and adds as
// many new ones.
func ids(ver, n int) []int {
	lo := 0
	if ver == 2 {
		lo = n / 20
	}
	out := make([]int, 0, n)
	for i := lo; i < lo+n; i++ {
		out = append(out, i)
	}
	return out
}

// kbManifest is a Directory mirroring the repository's kb into /srv/kb.
const kbManifest = `apiVersion: cortex-sync/v1alpha1
kind: Directory
metadata: {name: kb}
spec:
  path: /srv/kb
  source: kb
`

// dirVersion is a Directory mirroring n files into /srv/kb.
func dirVersion(t testing.TB, work string, ver, n int) *version {
	v := &version{name: fmt.Sprintf("dir-v%d", ver), repo: filepath.Join(work, fmt.Sprintf("dir-v%d", ver)), host: map[string]string{}}
	files := map[string]string{"kb.yaml": kbManifest}
	for _, id := range ids(ver, n) {
		rel := fmt.Sprintf("d%02d/f%05d.txt", id%100, id)
		c := body(id, ver)
		files["kb/"+rel] = c
		v.host["/srv/kb/"+rel] = sum([]byte(c))
	}
	writeTree(t, v.repo, files)
	v.owned = mirrorOwned(v)
	return v
}

// mirrorOwned checks that Directory/kb is in the inventory as created, and
// every file of v in its tree index.
func mirrorOwned(v *version) func(s *sandbox, snap *state.Snapshot, users map[string]string) error {
	return func(s *sandbox, snap *state.Snapshot, users map[string]string) error {
		e := snap.Find("Directory/kb")
		if e == nil || !e.Created {
			return fmt.Errorf("Directory/kb is not in the inventory as created: %+v", e)
		}
		x, err := index.Load(state.At(s.State).File("trees/Directory.kb.idx"))
		if err != nil {
			return err
		}
		missing := 0
		for p := range v.host {
			if x.Get(strings.TrimPrefix(p, "/srv/kb/")) == nil {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d mirrored files are not in the tree index", missing)
		}
		return nil
	}
}

// filesVersion is n File manifests, /etc/app/fNNNNN.conf.
func filesVersion(t testing.TB, work string, ver, n int) *version {
	v := &version{name: fmt.Sprintf("files-v%d", ver), repo: filepath.Join(work, fmt.Sprintf("files-v%d", ver)), host: map[string]string{}}
	var b strings.Builder
	for _, id := range ids(ver, n) {
		p := fmt.Sprintf("/etc/app/f%05d.conf", id)
		c := body(id%250+1, ver) // no 256 KiB documents: they would make the manifest huge
		fmt.Fprintf(&b, "---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: f%05d}\nspec:\n  path: %s\n  content: |\n", id, p)
		for _, line := range strings.SplitAfter(strings.TrimSuffix(c, "\n"), "\n") {
			b.WriteString("    " + line)
		}
		b.WriteString("\n")
		v.host[p] = sum([]byte(c))
	}
	writeTree(t, v.repo, map[string]string{"files.yaml": b.String()})
	v.owned = func(s *sandbox, snap *state.Snapshot, users map[string]string) error {
		var bad []string
		for p := range v.host {
			id := "File/" + strings.TrimSuffix(path.Base(p), ".conf")
			e := snap.Find(id)
			_, theirs := users[p]
			if e == nil || e.Created == theirs {
				bad = append(bad, id)
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("%d Files not in the inventory with the right ownership, e.g. %s", len(bad), bad[0])
		}
		return nil
	}
	return v
}

// tally is what a scenario survived.
type tally struct {
	kills, midRun, tempsLeft, userBytes int
	bytesLost                           int
}

func (tl tally) String() string {
	return fmt.Sprintf("%d kills (%d mid-run), %d temp files left by kills and swept, %d user bytes kept, %d bytes lost", tl.kills, tl.midRun, tl.tempsLeft, tl.userBytes, tl.bytesLost)
}

// afterKill checks the host a killed sync left: the snapshot and tree
// indexes load, and every file is absent, old or new, by hash (or a user's
// own content not yet replaced). It returns the host's files by hash.
func afterKill(t *testing.T, s *sandbox, from, to *version, users map[string]string, tl *tally) map[string]string {
	t.Helper()
	if _, err := s.loads(); err != nil {
		t.Errorf("after a kill the state does not load: %v", err)
	}
	files, err := regularFiles(s.Root)
	if err != nil {
		t.Fatal(err)
	}
	for p, h := range files {
		if hostfs.IsTemp(path.Base(p)) {
			tl.tempsLeft++
			continue
		}
		ok := h == to.host[p] || (from != nil && h == from.host[p])
		if c, theirs := users[p]; theirs && h == sum([]byte(c)) {
			ok = true
		}
		if !ok {
			t.Errorf("after a kill %s is torn or foreign (sha256 %s)", p, h[:12])
		}
	}
	tl.tempsLeft += len(temps(s.State))
	return files
}

// afterSync checks the host after the sync that follows a kill: converged
// (see convergedTo), exactly the desired files, every user file overwritten
// kept in a backup.
func afterSync(t *testing.T, s *sandbox, to *version, users map[string]string, tl *tally) {
	t.Helper()
	files := convergedTo(t, s, to, users)
	for p := range files {
		if _, ok := to.host[p]; !ok {
			t.Errorf("after a full sync %s is on the host but not desired", p)
		}
	}
	for p, c := range users {
		if s.backedUp(p, c) {
			tl.userBytes += len(c)
		} else {
			tl.bytesLost += len(c)
			t.Errorf("the user's own %s was overwritten and is in no backup", p)
		}
	}
}

// convergedTo checks the host after a sync (or an agent) that ran to its
// end: diff finds nothing to do, no temp file anywhere, every desired file
// holds its content, every file cortex-sync made is recorded as its own
// (users: the users' files it took over). It returns the host's files.
func convergedTo(t *testing.T, s *sandbox, to *version, users map[string]string) map[string]string {
	t.Helper()
	if err := s.converged(); err != nil {
		t.Error(err)
	}
	if left := append(temps(s.Root), temps(s.State)...); len(left) > 0 {
		t.Errorf("%d temp files left after a full sync: %v", len(left), left[:min(len(left), 5)])
	}
	files, err := regularFiles(s.Root)
	if err != nil {
		t.Fatal(err)
	}
	for p, h := range to.host {
		if files[p] != h {
			t.Errorf("after a full sync %s is not the desired content", p)
		}
	}
	snap, err := s.loads()
	if err != nil {
		t.Fatalf("after a full sync the state does not load: %v", err)
	}
	if err := to.owned(s, snap, users); err != nil {
		t.Error(err)
	}
	return files
}

// killDelay is a seeded moment in a full sync's run time.
func killDelay(rng *rand.Rand, full time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(full)))
}

// more reports whether to kill again: until kills syncs were killed before
// they ended, giving up after three times as many tries.
func more(tl tally) bool { return tl.midRun < *kills && tl.kills < 3**kills }

// crashInitial kills first syncs of v into an empty host (plus users' own
// files at some managed paths).
func crashInitial(t *testing.T, s *sandbox, v *version, users map[string]string) {
	rng := rand.New(rand.NewPCG(*seed, 1))
	seedUsers := func() {
		s.reset()
		for p, c := range users {
			full := filepath.Join(s.Root, filepath.FromSlash(p))
			os.MkdirAll(filepath.Dir(full), 0o755)
			if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var tl tally
	seedUsers()
	s.point(v.repo)
	start := time.Now()
	s.mustRun("sync", "--prune")
	full := time.Since(start)
	afterSync(t, s, v, users, &tl)
	t.Logf("a full first sync takes %s", full.Round(time.Millisecond))
	for i := 0; more(tl); i++ {
		seedUsers()
		d := killDelay(rng, full)
		began := time.Now()
		killed, out := s.killAfter(d, "sync", "--prune")
		tl.kills++
		switch {
		case killed:
			tl.midRun++
		case !strings.Contains(out, "Sync:"):
			t.Errorf("kill %d: the sync ended by itself without finishing:\n%s", i, tail(out, 10))
		default:
			full = time.Since(began) // it ended before its kill: the new measure of a full sync
		}
		afterKill(t, s, nil, v, users, &tl)
		s.mustRun("sync", "--prune")
		afterSync(t, s, v, users, &tl)
		if t.Failed() {
			t.Fatalf("kill %d at %s broke an invariant (seed %d)", i, d, *seed)
		}
	}
	// Ownership survived every kill: pruning everything leaves only what
	// users had before.
	s.point(filepath.Join(s.work, "empty"))
	os.MkdirAll(filepath.Join(s.work, "empty"), 0o755)
	s.mustRun("sync", "--prune", "--allow-empty")
	files, _ := regularFiles(s.Root)
	for p := range files {
		if _, ok := users[p]; !ok {
			t.Errorf("after pruning everything %s is left: cortex-sync lost track of it", p)
		}
	}
	if tl.midRun < *kills {
		t.Errorf("only %d of %d kills landed before the sync ended", tl.midRun, tl.kills)
	}
	t.Logf("initial: %s", tl)
}

// crashUpdate kills syncs between v1 and v2, both ways: half the files
// changed, 5%% added, 5%% removed.
func crashUpdate(t *testing.T, s *sandbox, v1, v2 *version) {
	rng := rand.New(rand.NewPCG(*seed, 2))
	var tl tally
	s.reset()
	s.point(v1.repo)
	s.mustRun("sync", "--prune")
	s.point(v2.repo)
	start := time.Now()
	s.mustRun("sync", "--prune")
	full := time.Since(start)
	afterSync(t, s, v2, nil, &tl)
	t.Logf("a full update takes %s", full.Round(time.Millisecond))
	cur, next := v2, v1
	for i := 0; more(tl); i++ {
		s.point(next.repo)
		d := killDelay(rng, full)
		began := time.Now()
		killed, out := s.killAfter(d, "sync", "--prune")
		tl.kills++
		switch {
		case killed:
			tl.midRun++
		case !strings.Contains(out, "Sync:"):
			t.Errorf("kill %d: the sync ended by itself without finishing:\n%s", i, tail(out, 10))
		default:
			full = time.Since(began) // it ended before its kill: the new measure of a full sync
		}
		afterKill(t, s, cur, next, nil, &tl)
		s.mustRun("sync", "--prune")
		afterSync(t, s, next, nil, &tl)
		if t.Failed() {
			t.Fatalf("kill %d at %s (%s to %s) broke an invariant (seed %d)", i, d, cur.name, next.name, *seed)
		}
		cur, next = next, cur
	}
	pruneEverything(t, s)
	if tl.midRun < *kills {
		t.Errorf("only %d of %d kills landed before the sync ended", tl.midRun, tl.kills)
	}
	t.Logf("update: %s", tl)
}

func TestCrashDirectory(t *testing.T) {
	work := t.TempDir()
	v1, v2 := dirVersion(t, work, 1, *dirFiles), dirVersion(t, work, 2, *dirFiles)
	t.Run("initial", func(t *testing.T) { crashInitial(t, newSandbox(t), v1, nil) })
	t.Run("update", func(t *testing.T) { crashUpdate(t, newSandbox(t), v1, v2) })
	// The intent log settled after every batch of 4096 files (at 32 MiB
	// of it otherwise): kills land before, between and after the index is
	// saved and the log started anew.
	t.Run("initial settled", func(t *testing.T) {
		t.Setenv("CORTEX_SYNC_MAX_INTENT_LOG", "1")
		crashInitial(t, newSandbox(t), v1, nil)
	})
}

func TestCrashFiles(t *testing.T) {
	work := t.TempDir()
	users := map[string]string{}
	for _, id := range []int{3, 500, 1001} {
		if id < *fileCount {
			users[fmt.Sprintf("/etc/app/f%05d.conf", id)] = fmt.Sprintf("a user's own file %d, kept before cortex-sync took it over\n", id)
		}
	}
	v1, v2 := filesVersion(t, work, 1, *fileCount), filesVersion(t, work, 2, *fileCount)
	t.Run("initial", func(t *testing.T) { crashInitial(t, newSandbox(t), v1, users) })
	t.Run("update", func(t *testing.T) { crashUpdate(t, newSandbox(t), v1, v2) })
}

var procKills = flag.Int("crash.prockills", 30, "SIGKILLs of syncs that change a Process")

// markerCopies counts the running processes whose argv is the supervised
// shell loop carrying marker as its last argument. The loop's own fork,
// between fork and exec of its sleep, carries the same argv for a moment:
// a child of a copy is not counted as another.
func markerCopies(marker string) int {
	parents := map[int]int{} // copy → its parent
	pids, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range pids {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
		if len(argv) >= 4 && argv[0] == "sh" && argv[len(argv)-1] == marker {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			parents[pid] = parentOf(pid)
		}
	}
	n := 0
	for _, ppid := range parents {
		if _, forked := parents[ppid]; !forked {
			n++
		}
	}
	return n
}

// parentOf is a process's parent pid, 0 when it is gone.
func parentOf(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// killMarked kills the copies of the supervised loop and their shims.
func killMarked(marker string) {
	pids, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range pids {
		data, err := os.ReadFile(p)
		if err != nil || !strings.HasSuffix(strings.TrimSuffix(string(data), "\x00"), "\x00"+marker) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			// Its parent is its shim (a cortex-sync of this test's binary).
			if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 1 {
				if ppid, _ := strconv.Atoi(f[1]); ppid > 1 {
					if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", ppid)); exe == bin {
						syscall.Kill(ppid, syscall.SIGKILL)
					}
				}
			}
		}
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// TestCrashProcess kills syncs that restart a supervised process (its spec
// changes every time) and checks that there are never two copies, and that
// the next sync leaves exactly one.
func TestCrashProcess(t *testing.T) {
	s := newSandbox(t)
	marker := fmt.Sprintf("cortex-sync-crashtest-%d-%d", os.Getpid(), *seed)
	repo := filepath.Join(s.work, "proc")
	empty := filepath.Join(s.work, "empty")
	os.MkdirAll(empty, 0o755)
	write := func(gen int) {
		writeTree(t, repo, map[string]string{"proc.yaml": fmt.Sprintf(`apiVersion: cortex-sync/v1alpha1
kind: Process
metadata: {name: looper}
spec:
  command: [sh, -c, 'while :; do sleep 0.2; done', looper, %s]
  env: {GENERATION: "%d"}
  stopTimeout: 2s
`, marker, gen)})
	}
	t.Cleanup(func() {
		s.point(empty)
		s.run("sync", "--prune", "--allow-empty")
		// Whatever a failed run left: the state dir's supervisor and what
		// it runs, then the copies by the marker only they carry.
		supervise.StopAll(s.State)
		killMarked(marker)
	})
	rng := rand.New(rand.NewPCG(*seed, 3))
	// Two copies fail the test but do not stop it: the count of kills that
	// led to them is the figure to report. The copies are killed and one
	// started again before the next kill.
	twice := 0
	watch := func(what string, d time.Duration) bool {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if n := markerCopies(marker); n > 1 {
				t.Errorf("%s: %d copies of the process run", what, n)
				twice++
				killMarked(marker)
				s.mustRun("sync")
				return false
			}
		}
		return true
	}
	write(0)
	s.point(repo)
	s.mustRun("sync")
	write(1)
	start := time.Now()
	s.mustRun("sync")
	full := time.Since(start)
	t.Logf("a sync that restarts the process takes %s", full.Round(time.Millisecond))
	var tl tally
	for gen := 2; tl.midRun < *procKills && tl.kills < 3**procKills; gen++ {
		write(gen)
		d := killDelay(rng, full)
		killed, _ := s.killAfter(d, "sync")
		tl.kills++
		if killed {
			tl.midRun++
		}
		if !watch(fmt.Sprintf("kill %d at %s", tl.kills, d), 300*time.Millisecond) {
			continue
		}
		if _, err := s.loads(); err != nil {
			t.Fatalf("kill %d: the state does not load: %v", tl.kills, err)
		}
		s.mustRun("sync")
		if !watch(fmt.Sprintf("the sync after kill %d at %s", tl.kills, d), 300*time.Millisecond) {
			continue
		}
		if n := markerCopies(marker); n != 1 {
			t.Fatalf("after kill %d at %s and a full sync, %d copies run, want 1", tl.kills, d, n)
		}
		if err := s.converged(); err != nil {
			t.Fatalf("kill %d at %s: %v", tl.kills, d, err)
		}
	}
	s.point(empty)
	s.mustRun("sync", "--prune", "--allow-empty")
	watch("after prune", 500*time.Millisecond)
	if n := markerCopies(marker); n != 0 {
		t.Errorf("after prune %d copies still run", n)
	}
	if tl.midRun < *procKills {
		t.Errorf("only %d of %d kills landed before the sync ended", tl.midRun, tl.kills)
	}
	t.Logf("process: %d kills (%d mid-run), %d left two copies", tl.kills, tl.midRun, twice)
}

// pruneEverything points the host at an empty source and prunes: whatever
// is left is something cortex-sync wrote and lost track of.
func pruneEverything(t *testing.T, s *sandbox) {
	t.Helper()
	os.MkdirAll(filepath.Join(s.work, "empty"), 0o755)
	s.point(filepath.Join(s.work, "empty"))
	s.mustRun("sync", "--prune", "--allow-empty")
	if files, _ := regularFiles(s.Root); len(files) > 0 {
		t.Errorf("after pruning everything %d files are left: cortex-sync lost track of them", len(files))
	}
}

var rounds = flag.Int("crash.rounds", 12, "generations of the mirrored tree pushed, each applied by a killed sync or agent (at most -crash.kills)")

// churn is a mirrored tree of n files as it changes, generation after
// generation: each removes 5% of the files (a whole directory, the rest
// anywhere, files just added included), changes half of the others, and
// adds 5% (one new directory, the rest anywhere). A directory holds 1% of
// the files at first.
type churn struct {
	rng   *rand.Rand
	per   int         // files a directory at first
	next  int         // the next new file's id
	dirs  int         // directories made so far
	ver   map[int]int // a file's id → the generation its content is of
	dirOf map[int]int // a file's id → its directory
}

func newChurn(n int) *churn {
	c := &churn{rng: rand.New(rand.NewPCG(*seed, 6)), per: max(1, n/100), next: n, ver: map[int]int{}, dirOf: map[int]int{}}
	for id := range n {
		c.ver[id], c.dirOf[id] = 0, id/c.per
	}
	c.dirs = (n-1)/c.per + 1
	return c
}

func (c *churn) rel(id int) string { return fmt.Sprintf("d%03d/f%05d.txt", c.dirOf[id], id) }

// advance makes generation r.
func (c *churn) advance(r int) {
	ids := slices.Sorted(maps.Keys(c.ver))
	n := len(ids)
	remove := func(id int) {
		delete(c.ver, id)
		delete(c.dirOf, id)
	}
	gone := c.dirOf[ids[c.rng.IntN(n)]] // a whole directory goes
	removed := 0
	for _, id := range ids {
		if c.dirOf[id] == gone {
			remove(id)
			removed++
		}
	}
	for removed < n/20 {
		id := ids[c.rng.IntN(n)]
		if _, ok := c.ver[id]; ok {
			remove(id)
			removed++
		}
	}
	left := slices.Sorted(maps.Keys(c.ver))
	for _, id := range left {
		if c.rng.IntN(2) == 0 {
			c.ver[id] = r
		}
	}
	for i := range n / 20 {
		dir := c.dirs // a new directory first, then anywhere
		if i >= c.per {
			dir = c.dirOf[left[c.rng.IntN(len(left))]]
		}
		c.ver[c.next], c.dirOf[c.next] = r, dir
		c.next++
	}
	c.dirs++
}

// generation is the tree of a generation: its source files, written only
// while needed, and what the host holds once it is applied.
type generation struct {
	*version
	files map[string]string
}

func (c *churn) generation(work string, r int) *generation {
	g := &generation{version: &version{name: fmt.Sprintf("gen%02d", r), repo: filepath.Join(work, fmt.Sprintf("gen%02d", r)), host: map[string]string{}},
		files: map[string]string{"kb.yaml": kbManifest}}
	for id, ver := range c.ver {
		b := body(id, 10+ver)
		g.files["kb/"+c.rel(id)] = b
		g.host["/srv/kb/"+c.rel(id)] = sum([]byte(b))
	}
	g.owned = mirrorOwned(g.version)
	return g
}

// leftovers lists what is in the mirror /srv/kb below root and neither
// desired nor the users': files (and symlinks), and directories that hold
// nothing desired.
func leftovers(root string, desired, users map[string]string) (files, dirs []string) {
	keep := map[string]bool{}
	for _, m := range []map[string]string{desired, users} {
		for p := range m {
			for d := path.Dir(p); d != "/"; d = path.Dir(d) {
				keep[d] = true
			}
		}
	}
	top := filepath.Join(root, "srv", "kb")
	filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = "/" + filepath.ToSlash(rel)
		_, want := desired[rel]
		_, theirs := users[rel]
		switch {
		case d.IsDir() && !keep[rel]:
			dirs = append(dirs, rel)
		case !d.IsDir() && !want && !theirs:
			files = append(files, rel)
		}
		return nil
	})
	return files, dirs
}

// crashGenerations pushes generation after generation of a mirrored tree
// and kills whatever applies each (apply: a sync, or an agent) at a seeded
// moment, never letting one finish in between: files written before a
// kill and removed by a later generation must still be known as
// cortex-sync's. After the rounds, an apply that is not killed must
// converge with nothing left over; then the Directory leaves Git, and the
// prune must leave only the users' own files.
func crashGenerations(t *testing.T, s *sandbox, apply func(d time.Duration) (killed bool, full time.Duration)) {
	rng := rand.New(rand.NewPCG(*seed, 5))
	users := map[string]string{
		"/srv/kb/users-own.txt": "put in the mirror by hand\n",
		"/srv/kb/mine/notes.md": "in a directory of the user's own\n",
	}
	s.reset()
	c := newChurn(*dirFiles)
	seen := map[string]map[string]bool{} // every content a path had
	push := func(r int, prev *generation) *generation {
		if r > 0 {
			c.advance(r)
		}
		g := c.generation(s.work, r)
		writeTree(t, g.repo, g.files)
		g.files = nil
		s.point(g.repo)
		if prev != nil {
			os.RemoveAll(prev.repo)
		}
		for p, h := range g.host {
			if seen[p] == nil {
				seen[p] = map[string]bool{}
			}
			seen[p][h] = true
		}
		return g
	}
	g := push(0, nil)
	s.mustRun("sync", "--prune")
	for p, content := range users {
		os.MkdirAll(filepath.Dir(filepath.Join(s.Root, p)), 0o755)
		if err := os.WriteFile(filepath.Join(s.Root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g = push(1, g)
	_, full := apply(time.Hour) // not killed: how long one generation takes
	t.Logf("applying a generation takes %s", full.Round(time.Millisecond))
	var tl tally
	torn := 0
	n := min(*rounds, *kills)
	for r := 2; r < 2+n; r++ {
		g = push(r, g)
		d := killDelay(rng, full)
		killed, took := apply(d)
		tl.kills++
		if killed {
			tl.midRun++
		} else {
			full = took // it ended before its kill: the new measure
		}
		if _, err := s.loads(); err != nil {
			t.Fatalf("round %d, kill at %s: the state does not load: %v", r, d, err)
		}
		files, err := regularFiles(s.Root)
		if err != nil {
			t.Fatal(err)
		}
		for p, h := range files {
			switch content, theirs := users[p]; {
			case hostfs.IsTemp(path.Base(p)):
				tl.tempsLeft++
			case theirs && h == sum([]byte(content)), seen[p][h]:
			default:
				torn++
				t.Errorf("round %d, kill at %s: %s is torn or foreign (sha256 %s)", r, d, p, h[:12])
			}
		}
	}
	apply(time.Hour)
	convergedTo(t, s, g.version, nil)
	// Nothing here is anyone else's: a backup is of something cortex-sync
	// wrote and did not know for its own.
	backups, _ := regularFiles(filepath.Join(s.State, "backups"))
	for p := range backups {
		t.Errorf("backed up, though cortex-sync wrote it: %s", p)
		break
	}
	// What is left over besides the desired files, and the users' own
	// files as they were.
	left := func(when string, desired map[string]string) (files, dirs []string) {
		files, dirs = leftovers(s.Root, desired, users)
		for _, p := range append(files, dirs...)[:min(len(files)+len(dirs), 10)] {
			t.Errorf("left over %s: %s", when, p)
		}
		for p, content := range users {
			if b, err := os.ReadFile(filepath.Join(s.Root, p)); err != nil || string(b) != content {
				t.Errorf("%s the user's own %s is gone or changed (%v)", when, p, err)
			}
		}
		return files, dirs
	}
	files, dirs := left("after converging", g.host)
	// The Directory leaves Git: what is left is the users'.
	empty := filepath.Join(s.work, "empty")
	os.MkdirAll(empty, 0o755)
	s.point(empty)
	s.mustRun("sync", "--prune", "--allow-empty")
	prunedFiles, prunedDirs := left("after the prune", nil)
	t.Logf("generations: %d rounds of %d files, %d kills mid-apply, %d torn, %d temp files left by kills; %d files of its own backed up; left over after converging: %d files, %d directories; after the prune: %d files, %d directories",
		n, *dirFiles, tl.midRun, torn, tl.tempsLeft, len(backups), len(files), len(dirs), len(prunedFiles), len(prunedDirs))
}

func TestCrashDirectoryGenerations(t *testing.T) {
	s := newSandbox(t)
	crashGenerations(t, s, func(d time.Duration) (bool, time.Duration) {
		start := time.Now()
		killed, out := s.killAfter(d, "sync", "--prune")
		if !killed && !strings.Contains(out, "Sync:") {
			t.Fatalf("the sync ended by itself without finishing:\n%s", tail(out, 10))
		}
		return killed, time.Since(start)
	})
}
