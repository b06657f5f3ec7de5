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
//
// Then the agent, cortex-sync run, on a mirror of the first 1,000 files
// of the tree and of the whole tree (11,478 files; 45,912 with -scale 4),
// measured from outside: a hand edit healed beside rsync -a healing the
// same edit in a copy, and a one-file commit applied on a signed webhook
// beside git pull + rsync -a of the same commit; -events of each, with
// the latencies' median, p95 and p99 and the CPU of an event.
//
// -files N measures a generated tree instead (gen.go: the shape of a
// knowledge base, about 50 files a directory, 3 to 5 deep) and a Git
// repository of it made with git fast-import; -data DIR keeps the
// generated set in DIR and uses it again on the next run, never writing
// to it (make bench BENCH="-files 1000000 -data /var/tmp/bench-1m").
// Besides each row's CPU, wall and peak RSS beside its peer's, it reports
// the state dir's bytes an entry and the most its intent logs held during
// the first sync, and the agent's resident set once it has converged.
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
	agent   bool // whether to measure the agent
	events  int  // events a row of the agent's
	busy    bool // a spinning process keeps one core busy
	lean    bool // the peers' own full copies of a large tree left out
	dirRows bool // whether to measure the --dir source's rows

	fetchOnly bool // the Git rows stop after the first fetch

	genFiles int    // -files: the size of the generated tree
	dataDir  string // -data: where the generated data set is
	genSeed  uint64 // -seed
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
	flag.BoolVar(&agent, "agent", true, "measure the agent (cortex-sync run) too")
	agentOnly := flag.Bool("agent-only", false, "measure only the agent's rows")
	flag.IntVar(&events, "events", 30, "events a row of the agent's; medians and percentiles are reported")
	flag.BoolVar(&dirRows, "dir", true, "measure the rows of the --dir source (the initial sync, diff, --verify)")
	flag.BoolVar(&fetchOnly, "fetch-only", false, "of the Git rows, measure only the first fetch")
	flag.BoolVar(&lean, "lean", false, "for a large tree: leave out the peers' work that needs a checkout of their own (git clone + rsync copies), and the new-commit row")
	flag.IntVar(&genFiles, "files", 0, "generate a tree of this many files and a Git repository of it, instead of copying -tree")
	flag.StringVar(&dataDir, "data", "", "the generated data set to use, made there first unless it holds one (READY); read only")
	flag.Uint64Var(&genSeed, "seed", 1, "the seed of the generated tree")
	genOnly := flag.Bool("gen-only", false, "generate the data set (-files, -data) and stop")
	flag.Parse()
	if *genOnly {
		if genFiles <= 0 || dataDir == "" {
			fmt.Fprintln(os.Stderr, "bench: -gen-only needs -files and -data")
			os.Exit(2)
		}
		if generated(dataDir) {
			fmt.Printf("%s holds a data set already\n", dataDir)
			return
		}
		st, err := generate(dataDir, genFiles, genSeed)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: generate:", err)
			os.Exit(1)
		}
		fmt.Printf("generated %s: %d files in %d directories, %.0f MB, in %s wall, %s CPU (user+sys, with git fast-import)\n",
			dataDir, st.files, st.dirs, float64(st.bytes)/1e6, st.wall.Round(time.Millisecond), st.cpu.Round(time.Millisecond))
		return
	}
	if *tree == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: go env GOROOT:", err)
			os.Exit(1)
		}
		*tree = filepath.Join(strings.TrimSpace(string(out)), "src")
	}
	if err := run(*bin, *tree, *runs, *keep, *gitOnly, *agentOnly); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// writeManifests writes the one manifest of repo: a Directory mirroring
// its kb/ at /srv/kb.
func writeManifests(repo string) error {
	manifest := "apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n"
	if err := os.WriteFile(filepath.Join(repo, "kb.yaml"), []byte(manifest), 0o644); err != nil {
		return err
	}
	// The tree holds YAML of its own: it is data, not manifests.
	return os.WriteFile(filepath.Join(repo, ".cortexignore"), []byte("kb/\n"), 0o644)
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

func run(bin, tree string, runs int, keep, gitOnly, agentOnly bool) error {
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
	// The source: a copy of -tree (GOROOT/src), or a generated data set,
	// used in place and never written to.
	var ds dataSet
	if genFiles > 0 || dataDir != "" {
		if ds, err = useData(work); err != nil {
			return err
		}
		tree = ds.kb
	} else {
		ds.repo = filepath.Join(work, "repo")
		ds.kb = filepath.Join(ds.repo, "kb")
		if err := os.MkdirAll(ds.repo, 0o755); err != nil {
			return err
		}
		if err := copyTree(tree, ds.kb, scale); err != nil {
			return err
		}
		if err := writeManifests(ds.repo); err != nil {
			return err
		}
		ds.mutable = true
	}
	repo, kb := ds.repo, ds.kb
	files, size := ds.files, ds.bytes
	if files == 0 {
		filepath.WalkDir(kb, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				files++
				if fi, err := d.Info(); err == nil {
					size += fi.Size()
				}
			}
			return nil
		})
		ds.files, ds.bytes = files, size
	}
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
	fmt.Printf("load at the start: %s\n", uptime())
	fmt.Printf("tree: %s, %s files, %.0f MB, %d alternated pairs a row", tree, commas(files), float64(size)/1e6, runs)
	if runs < 3 {
		fmt.Printf(" (few pairs: a ratio is of %d pair(s), the CPU of one run an upper bound on a loaded machine)", runs)
	}
	fmt.Printf("\n")
	if lean {
		fmt.Printf("lean (-lean): the Git sync and the agent are measured without a peer (it would need a clone and a copy of the tree of its own), no new-commit row;\n")
		fmt.Printf("the agent starts on the host the Git rows converged (its repository, root and state dir), not on an empty one\n")
	}
	fmt.Printf("\n")

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
	if dirRows && !gitOnly && !agentOnly {
		sync := job{fresh(root, root, state), bin, cs("sync"), state}
		p, err := pair(runs,
			job{fresh(root, dst), "rsync", []string{"-a", kb + "/", dst + "/"}, ""},
			sync)
		if err != nil {
			return err
		}
		// Issue 35's targets, at every size.
		t.row("initial sync (vs rsync -a)", p, target{wall: 1.0, cpu: 1.2, rssMB: 40})
		stateRow("state dir after the initial sync", state, files, p)
		// Converged: both destinations hold the tree already.
		if p, err = pair(runs,
			job{nil, "rsync", []string{"-a", "--dry-run", kb + "/", dst + "/"}, ""},
			job{nil, bin, cs("diff", "--exit-code"), ""}); err != nil {
			return err
		}
		t.row("diff, converged (vs rsync -a -n)", p, target{wall: diffWall, cpu: 1.0, rssMB: 30})
		if err := treeRows(bin, kb, dst, state, runs, ds.mutable, cs, t); err != nil {
			return err
		}
		// A large tree's copies are removed as soon as they are done with.
		for _, d := range []string{dst, root, state} {
			os.RemoveAll(d)
		}
	}

	var m *mirror
	if gitRows && !agentOnly {
		fmt.Printf("\nthe same tree from git daemon on 127.0.0.1\n")
		if m, err = gitBench(bin, work, ds, runs, t); err != nil {
			return err
		}
		if m != nil {
			defer m.stop()
		}
	}
	if agent && !gitOnly {
		if err := agentRows(bin, ds, work, events, m, t); err != nil {
			return err
		}
	}
	fmt.Printf("\nload at the end: %s\n", uptime())
	if !t.ok {
		return fmt.Errorf("a target was missed")
	}
	return nil
}

// dataSet is the tree a benchmark measures: a checkout (kb/ and its
// manifest) and, for the Git rows, a repository of it.
type dataSet struct {
	repo, kb     string // the checkout, and its kb/
	bare         string // a generated bare repository of the checkout; "" to commit the checkout
	files        int
	bytes        int64
	mutable      bool // the benchmark may write to the checkout
	generatedNow bool
}

// useData is the generated data set of -data, or of -files in work; it is
// generated first when it is not there.
func useData(work string) (dataSet, error) {
	dir, mutable := dataDir, false
	if dir == "" {
		dir, mutable = filepath.Join(work, "data"), true
	}
	ds := dataSet{repo: filepath.Join(dir, "tree"), bare: filepath.Join(dir, "repo.git"), mutable: mutable}
	ds.kb = filepath.Join(ds.repo, "kb")
	if !generated(dir) {
		if genFiles <= 0 {
			return ds, fmt.Errorf("%s holds no generated data set (no READY): give -files to make one", dir)
		}
		st, err := generate(dir, genFiles, genSeed)
		if err != nil {
			return ds, fmt.Errorf("generate %s: %w", dir, err)
		}
		fmt.Printf("generated %s: %s files in %s directories, %.0f MB, in %s wall, %s CPU (user+sys, with git fast-import)\n",
			dir, commas(st.files), commas(st.dirs), float64(st.bytes)/1e6, ms(st.wall), ms(st.cpu))
		ds.generatedNow = true
	}
	ds.files = fileCount(ds.kb)
	if genFiles > 0 && ds.files != genFiles {
		return ds, fmt.Errorf("%s holds %d files, not the %d of -files: remove it or give its size", dir, ds.files, genFiles)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "INFO")); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			fmt.Sscanf(l, "bytes %d", &ds.bytes)
		}
	}
	return ds, nil
}

// uptime is the load averages, as uptime prints them.
func uptime() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], ", ") + " (1, 5, 15 min)"
}
