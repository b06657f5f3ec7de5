//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// A generated data set is a directory holding
//
//	tree/      a checkout: kb/ (the tree), kb.yaml (a Directory mirroring
//	           kb/ at /srv/kb, as writeManifests writes it), .cortexignore
//	repo.git/  a bare repository of the same, one commit on main, made with
//	           git fast-import
//	READY      written last: the set is whole
//
// The tree has the shape of a knowledge base: about 50 files a directory,
// leaves 3 to 5 directories deep, a few files in the directories between,
// small text files of varied size (a log-normal around 1.2 kB, at most
// 64 kB), one in 5,000 a larger one (100 kB to 2 MB), one in 200
// executable. The same n and seed make the same tree, byte for byte.

const (
	genPerDir   = 50 // files a leaf directory, on average
	genMinDepth = 3  // the shallowest leaf, in directories under kb/
	genMaxDepth = 5  // the deepest
)

// genStats is what a generation made and what it cost.
type genStats struct {
	files, dirs int
	bytes       int64
	wall, cpu   time.Duration // cpu: this process and git fast-import
}

// generated says whether dir holds a whole data set.
func generated(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "READY"))
	return err == nil
}

// generate makes a data set of n files in dir, which must not hold one:
// the tree and, in the same pass, the bare repository, by streaming each
// file to git fast-import as it is written.
func generate(dir string, n int, seed uint64) (genStats, error) {
	var st genStats
	start := time.Now()
	cpu0 := selfCPU()
	if generated(dir) {
		return st, fmt.Errorf("%s holds a data set already (READY)", dir)
	}
	tree, bare := filepath.Join(dir, "tree"), filepath.Join(dir, "repo.git")
	for _, d := range []string{tree, bare} {
		if err := os.RemoveAll(d); err != nil {
			return st, err
		}
	}
	if err := os.MkdirAll(filepath.Join(tree, "kb"), 0o755); err != nil {
		return st, err
	}
	if err := git("init", "-q", "--bare", "-b", "main", bare); err != nil {
		return st, err
	}
	fi := exec.Command("git", "--git-dir", bare, "fast-import", "--quiet")
	fi.Stdout, fi.Stderr = os.Stderr, os.Stderr
	pipe, err := fi.StdinPipe()
	if err != nil {
		return st, err
	}
	if err := fi.Start(); err != nil {
		return st, err
	}
	w := bufio.NewWriterSize(pipe, 1<<20)
	g := &generator{
		rng:  rand.New(rand.NewPCG(seed, uint64(n))),
		tree: tree,
		w:    w,
	}
	g.text = wordText(g.rng, 16<<20)
	fmt.Fprintf(w, "commit refs/heads/main\ncommitter bench <bench@example.com> 1780000000 +0000\ndata <<EOF\na generated tree of %d files (seed %d)\nEOF\n", n, seed)
	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		return st, err
	}
	if err := writeManifests(manifests); err != nil {
		return st, err
	}
	for _, name := range []string{"kb.yaml", ".cortexignore"} {
		b, err := os.ReadFile(filepath.Join(manifests, name))
		if err != nil {
			return st, err
		}
		if err := g.file(name, b, 0o644); err != nil {
			return st, err
		}
	}
	os.RemoveAll(manifests)
	g.files, g.bytes = 0, 0 // of kb/ only
	if err := g.fill("kb", 0, n); err != nil {
		pipe.Close()
		fi.Wait()
		return st, err
	}
	fmt.Fprintf(w, "done\n")
	if err := w.Flush(); err != nil {
		return st, fmt.Errorf("git fast-import: %w", err)
	}
	pipe.Close()
	if err := fi.Wait(); err != nil {
		return st, fmt.Errorf("git fast-import: %v", err)
	}
	fiCPU := fi.ProcessState.UserTime() + fi.ProcessState.SystemTime()
	st.files, st.dirs, st.bytes = g.files, g.dirs, g.bytes
	st.wall, st.cpu = time.Since(start), selfCPU()-cpu0+fiCPU
	info := fmt.Sprintf("files %d\ndirectories %d\nbytes %d\nseed %d\ngenerated in %s wall, %s CPU (user+sys, with git fast-import)\n",
		st.files, st.dirs, st.bytes, seed, st.wall.Round(10*time.Millisecond), st.cpu.Round(10*time.Millisecond))
	if err := os.WriteFile(filepath.Join(dir, "INFO"), []byte(info), 0o644); err != nil {
		return st, err
	}
	syscall.Sync()
	return st, os.WriteFile(filepath.Join(dir, "READY"), nil, 0o644)
}

// generator writes the files of a tree, each to the checkout and to git
// fast-import's stream, inline in the one commit.
type generator struct {
	rng   *rand.Rand
	tree  string
	w     *bufio.Writer
	text  []byte // words to cut the files from
	buf   []byte
	files int
	dirs  int
	bytes int64
}

// fill makes dir (relative to the checkout) hold n files: a leaf when it
// is deep enough and n is about a directory's worth, else a few files of
// its own and subdirectories sharing the rest.
func (g *generator) fill(dir string, depth, n int) error {
	if err := os.MkdirAll(filepath.Join(g.tree, dir), 0o755); err != nil {
		return err
	}
	g.dirs++
	leaf := depth >= genMaxDepth || (depth >= genMinDepth && n <= genPerDir*8/5)
	own := n
	if !leaf {
		own = min(g.rng.IntN(4), n) // an index or a README between
	}
	for i := range own {
		if err := g.leafFile(dir, i); err != nil {
			return err
		}
	}
	rest := n - own
	if rest == 0 {
		return nil
	}
	// Fan out so that leaves fall between genMinDepth and genMaxDepth:
	// the leaves left spread over the levels left, less one, jittered.
	leaves := float64(rest) / genPerDir
	levels := float64(max(genMaxDepth-depth-1, 1))
	k := int(math.Round(math.Pow(leaves, 1/levels) * (0.7 + 0.6*g.rng.Float64())))
	k = max(min(k, rest), 2)
	if rest < 2 {
		k = 1
	}
	// Shares of the rest, uneven, summing to rest.
	weights := make([]float64, k)
	var sum float64
	for i := range weights {
		weights[i] = 0.5 + g.rng.Float64()
		sum += weights[i]
	}
	left := rest
	for i := range k {
		share := int(math.Round(float64(rest) * weights[i] / sum))
		if i == k-1 || share > left {
			share = left
		}
		left -= share
		if share == 0 {
			continue
		}
		if err := g.fill(filepath.Join(dir, g.name(i, "")), depth+1, share); err != nil {
			return err
		}
	}
	return nil
}

var (
	genWords = strings.Fields(`alpha beacon cedar delta ember fjord garnet harbor iris juniper kestrel
		lumen meadow nectar onyx prairie quartz raven sierra tundra umber vesper willow xenon yarrow zephyr
		atlas basalt cobalt dune estuary flint glacier heron inlet jasper karst lagoon mesa nimbus orchid
		pebble quill ridge summit thicket upland valley wharf yonder zenith anchor bramble canyon drift`)
	genExts = []string{".md", ".md", ".md", ".txt", ".txt", ".yaml", ".json", ".go", ".py", ".csv"}
)

// name is the ith name of a directory's entries: words and a number,
// with ext.
func (g *generator) name(i int, ext string) string {
	a, b := genWords[g.rng.IntN(len(genWords))], genWords[g.rng.IntN(len(genWords))]
	return fmt.Sprintf("%s-%s-%d%s", a, b, i, ext)
}

// leafFile writes the ith file of dir, of a size drawn as the package
// comment says.
func (g *generator) leafFile(dir string, i int) error {
	name := g.name(i, genExts[g.rng.IntN(len(genExts))])
	var size int
	if g.rng.IntN(5000) == 0 {
		size = 100_000 + g.rng.IntN(1_900_000)
	} else {
		size = int(math.Min(1200*math.Exp(g.rng.NormFloat64()), 64_000))
	}
	mode := os.FileMode(0o644)
	if g.rng.IntN(200) == 0 {
		mode = 0o755
	}
	rel := filepath.Join(dir, name)
	// A header naming the file makes every blob distinct; the rest is cut
	// from the words at a random place.
	g.buf = fmt.Appendf(g.buf[:0], "# %s\n", rel)
	size = max(size, len(g.buf))
	for len(g.buf) < size {
		off := g.rng.IntN(len(g.text))
		g.buf = append(g.buf, g.text[off:min(off+size-len(g.buf), len(g.text))]...)
	}
	return g.file(rel, g.buf, mode)
}

// file writes rel to the checkout and to the commit.
func (g *generator) file(rel string, b []byte, mode os.FileMode) error {
	if err := os.WriteFile(filepath.Join(g.tree, rel), b, mode); err != nil {
		return err
	}
	gitMode := "100644"
	if mode&0o111 != 0 {
		gitMode = "100755"
	}
	fmt.Fprintf(g.w, "M %s inline %s\ndata %d\n", gitMode, rel, len(b))
	g.w.Write(b)
	if _, err := io.WriteString(g.w, "\n"); err != nil {
		return fmt.Errorf("git fast-import: %w", err)
	}
	g.files++
	g.bytes += int64(len(b))
	return nil
}

// wordText is size bytes of lines of words.
func wordText(rng *rand.Rand, size int) []byte {
	b := make([]byte, 0, size+64)
	col := 0
	for len(b) < size {
		w := genWords[rng.IntN(len(genWords))]
		if rng.IntN(7) == 0 {
			w = fmt.Sprint(rng.IntN(100000))
		}
		b = append(b, w...)
		col += len(w) + 1
		if col > 60+rng.IntN(20) {
			b, col = append(b, '\n'), 0
		} else {
			b = append(b, ' ')
		}
	}
	return b[:size]
}

// selfCPU is the user and system time of this process so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
