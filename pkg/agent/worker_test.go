package agent_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Churn's shape: 1,000 Files in 10 manifests of 100, changed for
// churnFor by source edits and host edits at once.
const (
	churnFiles     = 1000
	churnManifests = 10
	churnFor       = 3 * time.Second
)

// churnRepo is the desired state under churn: each manifest's generation
// gives its Files' content.
type churnRepo struct {
	dir string
	gen [churnManifests]int
}

func churnPath(i int) string { return fmt.Sprintf("/etc/churn/d%02d/f%04d.conf", i%20, i) }

func (r *churnRepo) content(i int) string {
	return fmt.Sprintf("file %d generation %d\n", i, r.gen[i%churnManifests])
}

// write replaces manifest m atomically, so the agent never reads half of
// it.
func (r *churnRepo) write(t *testing.T, m int) {
	var b strings.Builder
	for i := m; i < churnFiles; i += churnManifests {
		fmt.Fprintf(&b, "---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: f%04d}\nspec: {path: %s, content: %q}\n", i, churnPath(i), r.content(i))
	}
	p := filepath.Join(r.dir, fmt.Sprintf("m%02d.yaml", m))
	if err := os.WriteFile(p+".tmp", []byte(b.String()), 0o644); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Error(err)
	}
}

// TestQueueUnderChurn drives the agent's work queue with 1,000 Files while
// their desired content changes in the source and their host copies are
// edited and deleted, all at once, with status read meanwhile: the race
// detector watches (make race), and once the churn stops the host must
// converge to the last desired state with nothing lost: every file
// holding its last content, every resource in the saved inventory, no
// temp file left, and a fresh plan empty.
func TestQueueUnderChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("drives 1,000 resources for seconds")
	}
	started := time.Now()
	repo := &churnRepo{dir: t.TempDir()}
	for m := range churnManifests {
		repo.write(t, m)
	}
	root, stateDir := t.TempDir(), t.TempDir()
	engine := reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 4, LockTimeout: 30 * time.Second}
	a := agent.New(agent.Options{
		Engine: engine, Source: &source.Dir{Dir: repo.dir, Path: "."},
		Interval: time.Hour, DriftInterval: time.Hour, SelfHeal: true, Prune: true,
		FightThreshold: 1 << 30, // the host edits are on purpose
		RetryBase:      10 * time.Millisecond, RetryMax: 200 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopAgent := sync.OnceValue(func() error { cancel(); return <-done })
	defer func() {
		if err := stopAgent(); err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, 2*time.Minute, "the first reconcile", func() bool { ok, _ := a.Ready(); return ok })

	// The churn: one goroutine edits the source, one the host, one reads
	// status; the counts say what they did.
	var edits, deletes, commits, reads int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	commitRng, editRng := rand.New(rand.NewPCG(1, 1)), rand.New(rand.NewPCG(1, 2))
	wg.Go(every(100*time.Millisecond, stop, func() {
		m := commitRng.IntN(churnManifests)
		repo.gen[m]++
		repo.write(t, m)
		a.Reconcile(agent.TriggerManual)
		commits++
	}))
	wg.Go(every(3*time.Millisecond, stop, func() {
		p := filepath.Join(root, churnPath(editRng.IntN(churnFiles)))
		if editRng.IntN(4) == 0 {
			if os.Remove(p) == nil {
				deletes++
			}
			return
		}
		if os.WriteFile(p, []byte("a hand edit\n"), 0o644) == nil {
			edits++
		}
	}))
	wg.Go(every(100*time.Millisecond, stop, func() {
		a.Status(ctx)
		reads++
	}))
	time.Sleep(churnFor) // the churn's length; convergence is polled below
	close(stop)
	wg.Wait()
	churned := time.Now()
	t.Logf("churn for %s: %d source commits, %d host edits, %d deletions, %d status reads", churnFor, commits, edits, deletes, reads)

	// The last word: a fetch and full scan, as a poll would do.
	a.Reconcile(agent.TriggerManual)
	waitFor(t, 2*time.Minute, "convergence after the churn", func() bool {
		wrong := 0
		for i := range churnFiles {
			if got, err := os.ReadFile(filepath.Join(root, churnPath(i))); err != nil || string(got) != repo.content(i) {
				wrong++
			}
		}
		ok, _ := a.Ready()
		return wrong == 0 && ok
	})
	t.Logf("converged %s after the churn stopped (%s in all)", time.Since(churned).Round(time.Millisecond), time.Since(started).Round(time.Millisecond))

	// Stopped, the agent has saved: the inventory holds every File as
	// created with its last spec, and a fresh plan finds nothing to do.
	if err := stopAgent(); err != nil {
		t.Fatal(err)
	}
	snap, err := state.At(stateDir).Load()
	if err != nil {
		t.Fatal(err)
	}
	missing := 0
	for i := range churnFiles {
		if e := snap.Find(fmt.Sprintf("File/f%04d", i)); e == nil || !e.Created {
			missing++
		}
	}
	if missing > 0 || len(snap.Inventory) != churnFiles {
		t.Errorf("inventory: %d entries, %d of %d Files missing or not created by cortex-sync", len(snap.Inventory), missing, churnFiles)
	}
	var temps []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && hostfs.IsTemp(d.Name()) {
			temps = append(temps, p)
		}
		return nil
	})
	if len(temps) > 0 {
		t.Errorf("%d temp files left, e.g. %s", len(temps), temps[0])
	}
	d, err := reconcile.Load(context.Background(), &source.Dir{Dir: repo.dir, Path: "."}, resource.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, err := reconcile.Open(context.Background(), engine, d, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if plan := s.Plan(context.Background()); plan.HasChanges() {
		t.Errorf("after convergence the plan has changes: %+v", plan.Summary())
	}
}

// waitFor polls cond until it holds, failing the test after limit.
// every returns a loop that runs fn each d until stop closes.
func every(d time.Duration, stop <-chan struct{}, fn func()) func() {
	return func() {
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				fn()
			}
		}
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, limit)
		}
	}
}

// TestAgentOwnsWhatItWasCreating: an agent killed after it created a File
// and before it recorded it left the File on the host and its intent in
// the snapshot. The next agent must record it as created (so prune may
// delete it), while a user's file that already held the desired content
// is recorded as taken over (prune leaves it). Before, both stayed out of
// the inventory: found as desired, they were never recorded at all.
func TestAgentOwnsWhatItWasCreating(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	for _, name := range []string{"ours", "theirs"} {
		writeFile(t, filepath.Join(repo, name+".yaml"), fmt.Sprintf("apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: %s}\nspec: {path: /etc/%s.conf, content: \"desired\\n\"}\n", name, name))
		writeFile(t, filepath.Join(root, "etc", name+".conf"), "desired\n")
	}
	d := state.At(stateDir)
	snap, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	snap.Intend([]state.Creation{{ID: "File/ours", Path: "/etc/ours.conf"}})
	if err := d.Save(snap); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, repo, root, stateDir)
	waitFor(t, 30*time.Second, "both Files recorded", func() bool {
		n := 0
		for _, r := range a.Status(context.Background()).Resources {
			if r.LastApplied != nil {
				n++
			}
		}
		return n == 2
	})
	a.Reconcile(agent.TriggerManual) // nothing to do; the burst is saved
	waitFor(t, 30*time.Second, "the saved inventory", func() bool {
		snap, err := d.Load()
		return err == nil && snap.Find("File/ours") != nil && snap.Find("File/theirs") != nil && len(snap.Creating) == 0
	})
	snap, _ = d.Load()
	if e := snap.Find("File/ours"); !e.Created {
		t.Error("File/ours, created by a killed agent that intended it, is recorded as taken over: prune would never delete it")
	}
	if e := snap.Find("File/theirs"); e.Created {
		t.Error("File/theirs, the user's own, is recorded as created: prune would delete it")
	}
}

// TestAgentIndexesWhatItWasMirroring: an agent killed after it wrote a
// mirrored file and before it saved the tree index left the file on the
// host as desired and out of the index. The next agent must index it, or
// removing it from Git would leave it on the host forever.
func TestAgentIndexesWhatItWasMirroring(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(repo, "kb.yaml"), "apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n")
	writeFile(t, filepath.Join(repo, "kb/old.md"), "old\n")
	syncOnce(t, repo, root, stateDir)
	// The new revision's file, as the killed agent left it.
	writeFile(t, filepath.Join(repo, "kb/new.md"), "new\n")
	writeFile(t, filepath.Join(root, "srv/kb/new.md"), "new\n")
	startAgent(t, repo, root, stateDir)
	waitFor(t, 30*time.Second, "new.md in the tree index", func() bool {
		x, err := index.Load(state.At(stateDir).File("trees/Directory.kb.idx"))
		return err == nil && x.Get("new.md") != nil
	})
}

// syncOnce runs one sync --prune of a directory source, in-process.
func syncOnce(t *testing.T, repo, root, stateDir string) {
	t.Helper()
	ctx := context.Background()
	d, err := reconcile.Load(ctx, &source.Dir{Dir: repo, Path: "."}, resource.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, err := reconcile.Open(ctx, reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second}, d, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Policy = reconcile.Policy{Prune: true}
	rep, err := s.Sync(ctx, s.Plan(ctx), state.Retention{})
	if err != nil || rep.Failed() {
		t.Fatalf("sync: %v %+v", err, rep)
	}
}
