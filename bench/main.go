// Command bench measures cortex-sync end to end against rsync on a real
// tree of about ten thousand files (GOROOT/src by default): the initial sync
// against rsync -a, and the diff of a converged host against
// rsync -a --dry-run. It prints medians, ratios to the targets, and peak RSS.
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

var (
	scale   int  // how many copies of the tree the source holds
	gitRows bool // whether to measure the Git source
)

func main() {
	bin := flag.String("bin", "bin/cortex-sync", "the cortex-sync binary")
	tree := flag.String("tree", "", "the tree to mirror (default: $(go env GOROOT)/src)")
	runs := flag.Int("runs", 7, "runs per measurement; the median is reported")
	keep := flag.Bool("keep", false, "keep the work directory")
	flag.BoolVar(&gitRows, "git", true, "measure the Git source too")
	flag.IntVar(&scale, "scale", 1, "copies of the tree side by side in the source (4: about 45,000 files)")
	gitOnly := flag.Bool("git-only", false, "measure only the rows served from git daemon")
	flag.Parse()
	if *tree == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: go env GOROOT:", err)
			os.Exit(1)
		}
		*tree = filepath.Join(strings.TrimSpace(string(out)), "src")
	}
	if err := run(*bin, *tree, *runs, *keep, *gitOnly); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// fresh is a setup step: it empties dirs and leaves an empty root.
func fresh(root string, dirs ...string) func() error {
	return func() error {
		for _, d := range dirs {
			if err := os.RemoveAll(d); err != nil {
				return err
			}
		}
		return os.MkdirAll(root, 0o755)
	}
}

// sample is one timed run of a command.
type sample struct {
	wall   time.Duration
	maxRSS int64 // KiB
}

// job is a command to time and what to do before each run of it.
type job struct {
	setup func() error
	name  string
	args  []string
}

// pair times two jobs in alternation, a run of one then a run of the
// other, so that slow drifts of the machine (disk writeback above all) fall
// on both sides alike rather than on whichever ran second.
func pair(runs int, a, b job) ([]sample, []sample, error) {
	var as, bs []sample
	for range runs {
		for _, j := range []struct {
			job
			out *[]sample
		}{{a, &as}, {b, &bs}} {
			s, err := measure(1, j.setup, j.name, j.args...)
			if err != nil {
				return nil, nil, err
			}
			*j.out = append(*j.out, s...)
		}
	}
	return as, bs, nil
}

func measure(runs int, setup func() error, name string, args ...string) ([]sample, error) {
	var out []sample
	for range runs {
		if setup != nil {
			if err := setup(); err != nil {
				return nil, err
			}
		}
		// Flush what earlier runs left dirty, so no run pays for another's
		// writeback.
		syscall.Sync()
		cmd := exec.Command(name, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		err := cmd.Run()
		wall := time.Since(start)
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 && strings.Contains(strings.Join(args, " "), "--exit-code") {
			err = nil // diff --exit-code reports changes with 1
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		out = append(out, sample{wall: wall, maxRSS: ru.Maxrss})
	}
	return out, nil
}

func median(s []sample) (time.Duration, int64) {
	walls := make([]time.Duration, len(s))
	var rss int64
	for i, x := range s {
		walls[i] = x.wall
		rss = max(rss, x.maxRSS)
	}
	slices.Sort(walls)
	return walls[len(walls)/2], rss
}

func run(bin, tree string, runs int, keep, gitOnly bool) error {
	if _, err := exec.LookPath("rsync"); err != nil {
		return fmt.Errorf("rsync is needed to compare against (apt-get install -y rsync)")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "cortex-sync-bench-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(work)
	}
	repo := filepath.Join(work, "repo")
	kb := filepath.Join(repo, "kb")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		return err
	}
	if err := copyTree(tree, kb, scale); err != nil {
		return err
	}
	manifest := "apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n"
	if err := os.WriteFile(filepath.Join(repo, "kb.yaml"), []byte(manifest), 0o644); err != nil {
		return err
	}
	// The tree holds YAML of its own: it is data, not manifests.
	if err := os.WriteFile(filepath.Join(repo, ".cortexignore"), []byte("kb/\n"), 0o644); err != nil {
		return err
	}
	files, size := 0, int64(0)
	filepath.WalkDir(kb, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files++
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	fmt.Printf("tree: %s, %d files, %.0f MB, %d runs each, medians\n\n", tree, files, float64(size)/1e6, runs)

	dst := filepath.Join(work, "rsync-dst")
	root := filepath.Join(work, "root")
	state := filepath.Join(work, "state")
	cs := func(args ...string) []string {
		return append(args, "--dir", repo, "--root", root, "--state-dir", state)
	}

	fmt.Printf("%-34s %10s %10s %8s %8s %10s\n", "measurement", "rsync", "cortex", "ratio", "target", "peak RSS")
	row := func(name string, base, ours []sample, target float64) bool {
		b, _ := median(base)
		o, rss := median(ours)
		ratio := float64(o) / float64(b)
		verdict := "ok"
		if target > 0 && ratio > target {
			verdict = "OVER"
		}
		if rss > 100*1024 {
			verdict += ", RSS OVER"
		}
		fmt.Printf("%-34s %10s %10s %7.2fx %7.2fx %8.1f MB  %s\n", name, b.Round(time.Millisecond), o.Round(time.Millisecond), ratio, target, float64(rss)/1024, verdict)
		return !strings.Contains(verdict, "OVER")
	}
	ok := true
	if !gitOnly {
		rsyncSync, csSync, err := pair(runs,
			job{fresh(root, dst), "rsync", []string{"-a", kb + "/", dst + "/"}},
			job{fresh(root, root, state), bin, cs("sync")})
		if err != nil {
			return err
		}
		// Converged: both destinations hold the tree already.
		rsyncDiff, csDiff, err := pair(runs,
			job{nil, "rsync", []string{"-a", "--dry-run", kb + "/", dst + "/"}},
			job{nil, bin, cs("diff", "--exit-code")})
		if err != nil {
			return err
		}
		ok = row("initial sync (vs rsync -a)", rsyncSync, csSync, 1.5)
		ok = row("diff, converged (vs rsync -n)", rsyncDiff, csDiff, 1.25) && ok
		treeOK, err := treeRows(bin, kb, dst, state, runs, cs, row)
		if err != nil {
			return err
		}
		ok = ok && treeOK
	}

	if !gitRows {
		return verdict(ok)
	}
	fmt.Printf("\nthe same tree from git daemon on 127.0.0.1\n")
	g, err := gitBench(bin, work, repo, runs)
	if err != nil {
		return err
	}
	// Issue 10's targets. A new commit measured 0.43x on a quiet machine
	// before the pack indexer; 0.5 leaves room for noise.
	ok = row("initial fetch (vs clone --depth 1 -n)", g.clone, g.fetch, 1.3) && ok
	ok = row("fetch + sync (vs clone --depth 1 + rsync)", g.cloneSync, g.fetchSync, 1.0) && ok
	ok = row("new commit (vs git pull + rsync)", g.pullSync, g.commitSync, 0.5) && ok
	row("no-op poll, whole process (vs git ls-remote)", g.lsRemote, g.noop, 0)
	return verdict(ok)
}

type gitSamples struct {
	clone, fetch, cloneSync, fetchSync, pullSync, commitSync, lsRemote, noop []sample
}

// gitBench commits the repository, serves it with git daemon, and measures
// cortex-sync's Git source against the git command.
func gitBench(bin, work, repo string, runs int) (*gitSamples, error) {
	git := func(args ...string) error {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@b", "GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@b")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := git("init", "-q", "-b", "main", repo); err != nil {
		return nil, err
	}
	if err := git("-C", repo, "add", "-A"); err != nil {
		return nil, err
	}
	if err := git("-C", repo, "commit", "-q", "-m", "tree"); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	daemon := exec.Command("git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
		fmt.Sprintf("--port=%d", port), "--base-path="+work, work)
	daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := daemon.Start(); err != nil {
		return nil, err
	}
	defer func() { syscall.Kill(-daemon.Process.Pid, syscall.SIGKILL); daemon.Wait() }()
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			break
		} else if i > 200 {
			return nil, fmt.Errorf("git daemon did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	url := fmt.Sprintf("git://127.0.0.1:%d/repo", port)
	clone := filepath.Join(work, "clone")
	dst := filepath.Join(work, "git-rsync-dst")
	root := filepath.Join(work, "git-root")
	state := filepath.Join(work, "git-state")
	cs := func(args ...string) []string {
		return append(args, "--repo", url, "--branch", "main", "--root", root, "--state-dir", state)
	}
	s := &gitSamples{}
	// The daemon's first pack of the tree is slow for everyone: warm it.
	if _, err = measure(1, fresh(root, clone), "git", "clone", "-q", "--depth", "1", "--no-checkout", url, clone); err != nil {
		return nil, err
	}
	if s.clone, s.fetch, err = pair(runs,
		job{fresh(root, clone), "git", []string{"clone", "-q", "--depth", "1", "--no-checkout", url, clone}},
		job{fresh(root, state), bin, cs("validate")}); err != nil {
		return nil, err
	}
	// Clone and copy: the shell does both, so one process tree is timed.
	cloneRsync := fmt.Sprintf("git clone -q --depth 1 %s %s && rsync -a --exclude .git %s/kb/ %s/", url, clone, clone, dst)
	if s.cloneSync, s.fetchSync, err = pair(runs,
		job{fresh(root, clone, dst), "sh", []string{"-c", cloneRsync}},
		job{fresh(root, root, state), bin, cs("sync")}); err != nil {
		return nil, err
	}
	// One new commit, each run: a file of the tree changes.
	n := 0
	commit := func() error {
		n++
		p := filepath.Join(repo, "kb", "fmt", "print.go")
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		fmt.Fprintf(f, "\n// change %d\n", n)
		f.Close()
		if err := git("-C", repo, "commit", "-q", "-am", fmt.Sprintf("change %d", n)); err != nil {
			return err
		}
		return nil
	}
	pullRsync := fmt.Sprintf("git -C %s pull -q --ff-only && rsync -a --exclude .git %s/kb/ %s/", clone, clone, dst)
	if s.pullSync, s.commitSync, err = pair(runs,
		job{commit, "sh", []string{"-c", pullRsync}},
		job{commit, bin, cs("sync")}); err != nil {
		return nil, err
	}
	if s.lsRemote, s.noop, err = pair(runs,
		job{nil, "git", []string{"ls-remote", url, "refs/heads/main"}},
		job{nil, bin, cs("validate")}); err != nil {
		return nil, err
	}
	return s, nil
}
