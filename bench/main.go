//go:build linux

// Command bench measures cortex-sync end to end against rsync and git on a
// real tree of about eleven thousand files (GOROOT/src by default; -scale 4
// for about 45,000): the initial sync against rsync -a, the diff of a
// converged host against rsync -a --dry-run, and the Git source against
// git clone and git pull + rsync. Each comparison runs as pairs, a run of
// each side, alternated; for every row it prints the medians, the median
// of the per-pair ratios of wall time and of CPU time (user + system, as
// the kernel accounted it to each process and the children it waited
// for), peak RSS, and the load average before and after. CPU time is the
// figure a shared machine does not move; -busy keeps one core busy
// throughout to show what wall time becomes when the other core is taken.
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

var (
	scale   int  // how many copies of the tree the source holds
	gitRows bool // whether to measure the Git source
	busy    bool // a spinning process keeps one core busy
)

func main() {
	spinIfAsked()
	bin := flag.String("bin", "bin/cortex-sync", "the cortex-sync binary")
	tree := flag.String("tree", "", "the tree to mirror (default: $(go env GOROOT)/src)")
	runs := flag.Int("runs", 7, "pairs per comparison; medians are reported")
	keep := flag.Bool("keep", false, "keep the work directory")
	flag.BoolVar(&gitRows, "git", true, "measure the Git source too")
	flag.IntVar(&scale, "scale", 1, "copies of the tree side by side in the source (4: about 45,000 files)")
	flag.BoolVar(&busy, "busy", false, "keep one core busy with a spinning process during the runs")
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

// machine names what the figures were taken on.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	var u syscall.Utsname
	kernel := runtime.GOOS
	if syscall.Uname(&u) == nil {
		var b []byte
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		kernel += " " + string(b)
	}
	return fmt.Sprintf("%s, %d cores, %s, %s", model, runtime.NumCPU(), kernel, time.Now().Format("2006-01-02 15:04"))
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
	mode := "no spinner: the machine as it is (an idle target needs load below 1)"
	if busy {
		mode = "busy: a spinning process keeps one core busy throughout"
		stop, err := startSpinner()
		if err != nil {
			return fmt.Errorf("start the spinner: %w", err)
		}
		defer stop()
	}
	fmt.Printf("machine: %s\n", machine())
	fmt.Printf("mode: %s\n", mode)
	fmt.Printf("tree: %s, %d files, %.0f MB, %d alternated pairs a row\n\n", tree, files, float64(size)/1e6, runs)

	dst := filepath.Join(work, "rsync-dst")
	root := filepath.Join(work, "root")
	state := filepath.Join(work, "state")
	cs := func(args ...string) []string {
		return append(args, "--dir", repo, "--root", root, "--state-dir", state)
	}
	// Issue 20's targets: with the other core busy the wall-clock edge of
	// walking with two cores is gone, and a converged diff need only not
	// be slower than rsync.
	diffWall := 0.65
	if busy {
		diffWall = 1.0
	}
	t := newTable()
	if !gitOnly {
		p, err := pair(runs,
			job{fresh(root, dst), "rsync", []string{"-a", kb + "/", dst + "/"}},
			job{fresh(root, root, state), bin, cs("sync")})
		if err != nil {
			return err
		}
		t.row("initial sync (vs rsync -a)", p, target{wall: 1.0, rssMB: 40})
		// Converged: both destinations hold the tree already.
		if p, err = pair(runs,
			job{nil, "rsync", []string{"-a", "--dry-run", kb + "/", dst + "/"}},
			job{nil, bin, cs("diff", "--exit-code")}); err != nil {
			return err
		}
		t.row("diff, converged (vs rsync -a -n)", p, target{wall: diffWall, cpu: 1.0, rssMB: 30})
		if err := treeRows(bin, kb, dst, state, runs, cs, t); err != nil {
			return err
		}
	}

	if gitRows {
		fmt.Printf("\nthe same tree from git daemon on 127.0.0.1\n")
		if err := gitBench(bin, work, repo, runs, t); err != nil {
			return err
		}
	}
	if !t.ok {
		return fmt.Errorf("a target was missed")
	}
	return nil
}
