//go:build linux

package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// git runs the git command, with an identity for its commits.
func git(args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@b", "GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@b")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// commitAll makes dir a repository on branch main holding all it has.
func commitAll(dir string) error {
	if err := git("init", "-q", "-b", "main", dir); err != nil {
		return err
	}
	if err := git("-C", dir, "add", "-A"); err != nil {
		return err
	}
	return git("-C", dir, "commit", "-q", "-m", "tree")
}

// serveGit serves every repository under base with git daemon on
// 127.0.0.1; it returns the URL of base and what stops the daemon.
func serveGit(base string) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	daemon := exec.Command("git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
		fmt.Sprintf("--port=%d", port), "--base-path="+base, base)
	daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := daemon.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { syscall.Kill(-daemon.Process.Pid, syscall.SIGKILL); daemon.Wait() }
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			break
		} else if i > 200 {
			stop()
			return "", nil, fmt.Errorf("git daemon did not start")
		}
		time.Sleep(20 * time.Millisecond) // polling for the daemon's port, bounded
	}
	return fmt.Sprintf("git://127.0.0.1:%d", port), stop, nil
}

// servedRepo makes the bare repository a benchmark serves from its data
// set in dir/name.git: the checkout committed, or the generated
// repository's objects borrowed.
func servedRepo(ds dataSet, dir, name string) (*bareRepo, error) {
	bare := filepath.Join(dir, name+".git")
	if ds.bare != "" {
		return newBareShared(ds.bare, bare)
	}
	return newBareFromCheckout(ds.repo, bare)
}

// fetchTimeout is cortex-sync's --fetch-timeout in the benchmark: git
// daemon takes minutes to count a million objects before it answers on
// a loaded machine, past the default minute.
const fetchTimeout = "30m"

// mirror is a host the Git rows left converged, with what serves its
// repository: with -lean the agent starts on it, so that a tree of a
// million files is synced from Git once, not twice.
type mirror struct {
	url, root, state string
	repo             *bareRepo
	stop             func() // stops git daemon
}

// gitBench serves the data set's repository with git daemon and measures
// cortex-sync's Git source against the git command. With -lean it hands
// on the host it converged, and the daemon serving it.
func gitBench(bin, work string, ds dataSet, runs int, t *table) (m *mirror, err error) {
	served := filepath.Join(work, "served")
	if err := os.MkdirAll(served, 0o755); err != nil {
		return nil, err
	}
	repo, err := servedRepo(ds, served, "repo")
	if err != nil {
		return nil, err
	}
	base, stop, err := serveGit(served)
	if err != nil {
		return nil, err
	}
	defer func() {
		if m == nil {
			stop()
		}
	}()
	url := base + "/repo.git"
	clone := filepath.Join(work, "clone")
	dst := filepath.Join(work, "git-rsync-dst")
	root := filepath.Join(work, "git-root")
	state := filepath.Join(work, "git-state")
	cs := func(args ...string) []string {
		return append(args, "--repo", url, "--branch", "main", "--root", root, "--state-dir", state, "--fetch-timeout", fetchTimeout)
	}
	// The daemon's first pack of the tree is slow for everyone: warm it
	// (not with -lean, where the clone of a million files takes minutes:
	// the first pair's clone, which runs first, pays for it).
	if err := fresh(root, clone)(); err != nil {
		return nil, err
	}
	if lean {
		fmt.Printf("(-lean: no clone to warm the daemon's pack first)\n")
	} else if err := git("clone", "-q", "--depth", "1", "--no-checkout", url, clone); err != nil {
		return nil, err
	}
	// The first fetch: validate with an empty state dir fetches the
	// branch (negotiation, the pack received, its index written) and
	// loads the manifests of the tree's top (kb.yaml; kb/ is data,
	// .cortexignore'd). It touches no host file: the fetch, as near as a
	// command comes to it.
	p, err := pair(runs,
		job{fresh(root, clone), "git", []string{"clone", "-q", "--depth", "1", "--no-checkout", url, clone}, ""},
		job{fresh(root, state), bin, cs("validate"), ""})
	if err != nil {
		return nil, err
	}
	// Issue 35's targets; issue 10's wall time.
	t.row("first fetch (vs clone --depth 1 -n)", p, target{wall: 1.3, cpu: 1.0, rssMB: 64})
	if fetchOnly {
		os.RemoveAll(clone)
		os.RemoveAll(state)
		return nil, nil
	}
	// Clone and copy: the shell does both, so one process tree is timed.
	cloneRsync := fmt.Sprintf("git clone -q --depth 1 %s %s && rsync -a --exclude .git %s/kb/ %s/", url, clone, clone, dst)
	peer := job{fresh(root, clone, dst), "sh", []string{"-c", cloneRsync}, ""}
	if lean {
		peer = job{}
	}
	if p, err = pair(runs, peer, job{fresh(root, root, state), bin, cs("sync"), state}); err != nil {
		return nil, err
	}
	t.row("fetch + sync (vs clone --depth 1 + rsync)", p, target{wall: 1.0})
	stateRow("state dir after the sync from Git", state, ds.files, p)
	// Converged from Git: the ref is asked for, the tree read from the
	// cached pack and compared with the host. The peer compares two
	// copies of the tree as rsync would: the clone's and its copy, or
	// (-lean) the data set's and cortex-sync's mirror.
	peer = job{nil, "rsync", []string{"-a", "--dry-run", "--exclude", ".git", clone + "/kb/", dst + "/"}, ""}
	if lean {
		peer.args = []string{"-a", "--dry-run", ds.kb + "/", filepath.Join(root, "srv", "kb") + "/"}
	}
	if p, err = pair(runs, peer, job{nil, bin, cs("diff", "--exit-code"), ""}); err != nil {
		return nil, err
	}
	t.row("diff, converged, Git (vs rsync -a -n)", p, target{rssMB: 40})
	if lean {
		fmt.Printf("%-44s not measured (-lean): its peer pulls into a checkout of its own\n", "new commit (vs git pull + rsync)")
	} else if err := commitRow(bin, ds, repo, clone, dst, runs, cs, t); err != nil {
		return nil, err
	}
	if p, err = pair(runs,
		job{nil, "git", []string{"ls-remote", url, "refs/heads/main"}, ""},
		job{nil, bin, cs("validate"), ""}); err != nil {
		return nil, err
	}
	t.row("no-op poll, whole process (vs git ls-remote)", p, target{})
	if lean {
		os.RemoveAll(clone)
		return &mirror{url: url, root: root, state: state, repo: repo, stop: stop}, nil
	}
	for _, d := range []string{clone, dst, root, state, served} {
		os.RemoveAll(d)
	}
	return nil, nil
}

// commitRow measures a new commit of one file: git pull + rsync -a
// against a sync.
func commitRow(bin string, ds dataSet, repo *bareRepo, clone, dst string, runs int, cs func(...string) []string, t *table) error {
	// One new commit, each run: a file of the tree changes.
	target1, err := middleFile(ds.kb)
	if err != nil {
		return err
	}
	target1 = filepath.Join("kb", target1)
	content, err := repo.read(target1)
	if err != nil {
		return err
	}
	n := 0
	commit := func() error {
		n++
		content = fmt.Appendf(content, "\n// change %d\n", n)
		return repo.commit(target1, content)
	}
	pullRsync := fmt.Sprintf("git -C %s pull -q --ff-only && rsync -a --exclude .git %s/kb/ %s/", clone, clone, dst)
	p, err := pair(runs,
		job{commit, "sh", []string{"-c", pullRsync}, ""},
		job{commit, bin, cs("sync"), ""})
	if err != nil {
		return err
	}
	t.row("new commit (vs git pull + rsync)", p, target{wall: 0.5})
	return nil
}
