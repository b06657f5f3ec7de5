package agent_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
)

// syncByHandEnv makes the test binary a `cortex-sync sync` by hand: a
// process of its own, with nothing in memory of the agent's.
const syncByHandEnv = "CORTEX_SYNC_TEST_SYNC_BY_HAND"

// TestSyncByHandProcess is the child's part of
// TestAgentSeesTheIndexASyncByHandWrote.
func TestSyncByHandProcess(t *testing.T) {
	arg := os.Getenv(syncByHandEnv)
	if arg == "" {
		t.Skip("only as another process of TestAgentSeesTheIndexASyncByHandWrote")
	}
	var dirs [3]string
	if err := json.Unmarshal([]byte(arg), &dirs); err != nil {
		t.Fatal(err)
	}
	syncOnce(t, dirs[0], dirs[1], dirs[2])
}

// TestAgentSeesTheIndexASyncByHandWrote: the agent keeps a mirror's index
// loaded between events; a sync by hand in another process that writes a
// file into the mirror records it in the index, and the agent, told of a
// revision without the file, deletes it as its own: it read the index as
// the sync left it, not as it had kept it.
func TestAgentSeesTheIndexASyncByHandWrote(t *testing.T) {
	repo, root, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(repo, "kb.yaml"), "apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n")
	writeFile(t, filepath.Join(repo, ".cortexignore"), "kb/\n")
	writeFile(t, filepath.Join(repo, "kb/a.md"), "a\n")
	a := runAgent(t, repo, agent.Options{
		Engine:         reconcile.Config{Root: root, StateDir: stateDir, Concurrency: 2, LockTimeout: 10 * time.Second},
		FightThreshold: 1 << 30,
	})
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(root, "srv/kb", name))
		return string(b)
	}
	waitFor(t, 30*time.Second, "the mirror synced and the agent ready", func() bool { ok, _ := a.Ready(); return ok && read("a.md") == "a\n" })
	// A base is trusted by its identity once it is a little old (state's
	// racyMargin, 100 ms): only then is the index kept.
	waitFor(t, 30*time.Second, "the tree's index 300 ms old", func() bool {
		idx, _ := filepath.Glob(filepath.Join(stateDir, "trees", "*.idx"))
		if len(idx) != 1 {
			return false
		}
		fi, err := os.Stat(idx[0])
		return err == nil && time.Since(fi.ModTime()) > 300*time.Millisecond
	})
	// Healed edits: the agent loads and saves the tree's index, and keeps it.
	for _, edit := range []string{"edit 1\n", "edit 2\n"} {
		writeFile(t, filepath.Join(root, "srv/kb/a.md"), edit)
		waitFor(t, 30*time.Second, "the edit healed", func() bool { return read("a.md") == "a\n" })
	}

	writeFile(t, filepath.Join(repo, "kb/b.md"), "b\n")
	arg, _ := json.Marshal([3]string{repo, root, stateDir})
	cmd := exec.Command(os.Args[0], "-test.run=^TestSyncByHandProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), syncByHandEnv+"="+string(arg))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the sync by hand: %v\n%s", err, out)
	}
	if read("b.md") != "b\n" {
		t.Fatal("the sync by hand did not write b.md")
	}

	if err := os.Remove(filepath.Join(repo, "kb/b.md")); err != nil {
		t.Fatal(err)
	}
	a.Reconcile(agent.TriggerManual)
	waitFor(t, 30*time.Second, "b.md, the sync's, deleted with the revision without it", func() bool {
		_, err := os.Lstat(filepath.Join(root, "srv/kb/b.md"))
		return errors.Is(err, fs.ErrNotExist)
	})
}
