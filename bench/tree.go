//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// copyTree fills kb with the tree, or with scale copies of it side by side
// (kb/0, kb/1, ...) to measure a larger tree of the same shape.
func copyTree(tree, kb string, scale int) error {
	if scale <= 1 {
		if out, err := exec.Command("cp", "-a", tree, kb).CombinedOutput(); err != nil {
			return fmt.Errorf("copy %s: %v: %s", tree, err, out)
		}
		return nil
	}
	if err := os.MkdirAll(kb, 0o755); err != nil {
		return err
	}
	for i := range scale {
		if out, err := exec.Command("cp", "-a", tree, filepath.Join(kb, strconv.Itoa(i))).CombinedOutput(); err != nil {
			return fmt.Errorf("copy %s: %v: %s", tree, err, out)
		}
	}
	return nil
}

// treeRows measures the converged mirror beyond its check: hashing every
// host file (--verify) against rsync -a -c -n, which hashes both sides, and
// what a one-file change costs in the state dir. It runs after the diff rows,
// with both destinations converged.
func treeRows(bin, kb, dst, state string, runs int, mutable bool, cs func(...string) []string, t *table) error {
	p, err := pair(runs,
		job{nil, "rsync", []string{"-a", "-c", "--dry-run", kb + "/", dst + "/"}, ""},
		job{nil, bin, cs("diff", "--exit-code", "--verify"), ""})
	if err != nil {
		return err
	}
	t.row("diff --verify (vs rsync -a -c -n)", p, target{cpu: 1.0, rssMB: 30})
	if !mutable {
		fmt.Printf("%-44s not measured: the tree is a shared data set (-data), never written to\n", "one-file sync, bytes written")
		return nil
	}

	// One file of the source changes, then a sync: what the state dir gained
	// is counted from its files, a file with a new inode whole, one that
	// grew in place by its growth (an append). Writes through a temp file
	// and rename always show as new inodes, so nothing written is missed.
	var written, wchar []int64
	var files []int64
	file, err := middleFile(kb)
	if err != nil {
		return err
	}
	file = filepath.Join(kb, file)
	for n := range runs {
		f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		fmt.Fprintf(f, "\n// change %d\n", n)
		f.Close()
		before, err := statTree(state)
		if err != nil {
			return err
		}
		// The shell reads its own I/O counters after the sync: they
		// include those of the child it waited for.
		script := `"$@" >/dev/null 2>&1 || exit $?; grep '^wchar' /proc/$$/io`
		out, err := exec.Command("sh", append([]string{"-c", script, "sh", bin}, cs("sync")...)...).Output()
		if err != nil {
			return fmt.Errorf("one-file sync: %v", err)
		}
		after, err := statTree(state)
		if err != nil {
			return err
		}
		b, k := grew(before, after)
		written, files = append(written, b), append(files, int64(k))
		w, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(string(out), "wchar:")), 10, 64)
		wchar = append(wchar, w)
	}
	fmt.Printf("%-44s state dir: %s in %d files; all writes of the process (wchar): %s\n",
		"one-file sync, bytes written", kB(medianOf(written)), medianOf(files), kB(medianOf(wchar)))
	return nil
}

type fileID struct {
	ino   uint64
	size  int64
	mtime time.Time
}

func statTree(dir string) (map[string]fileID, error) {
	out := map[string]fileID{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		out[p] = fileID{ino: fi.Sys().(*syscall.Stat_t).Ino, size: fi.Size(), mtime: fi.ModTime()}
		return nil
	})
	return out, err
}

// grew is the bytes written between two listings, and how many files.
func grew(before, after map[string]fileID) (int64, int) {
	var n int64
	k := 0
	for p, a := range after {
		b, ok := before[p]
		switch {
		case !ok || b.ino != a.ino:
			n += a.size
		case a.mtime.Equal(b.mtime):
			continue
		case a.size > b.size:
			n += a.size - b.size
		default:
			n += a.size // rewritten in place: counted whole
		}
		k++
	}
	return n, k
}

func kB(n int64) string { return fmt.Sprintf("%.1f kB", float64(n)/1000) }

// stateRow prints what the state dir holds after the last run of ours in
// p, a sync of files entries: its bytes, per entry, by top-level entry
// (the Git cache apart), and the most it and its intent logs held during
// a run.
func stateRow(name, state string, files int, p *pairs) {
	var peakState, peakIntent int64
	for _, s := range p.ours {
		peakState, peakIntent = max(peakState, s.peakState), max(peakIntent, s.peakIntent)
	}
	total, _ := dirBytes(state)
	var parts []string
	entries, _ := os.ReadDir(state)
	for _, e := range entries {
		n, _ := dirBytes(filepath.Join(state, e.Name()))
		name := e.Name() + "/"
		if !e.IsDir() {
			name = e.Name()
			if fi, err := e.Info(); err == nil {
				n = fi.Size()
			}
		}
		if n >= 1000 {
			parts = append(parts, fmt.Sprintf("%s %s (%.0f B/entry)", name, mB(n), float64(n)/float64(max(files, 1))))
		}
	}
	fmt.Printf("%-44s %s, %.0f bytes an entry: %s (the rest under 1 kB)\n", name, mB(total), float64(total)/float64(max(files, 1)), strings.Join(parts, ", "))
	fmt.Printf("%-44s state dir at most %s during a run; intent logs at most %s (sampled every 20 ms)\n", "", mB(peakState), mB(peakIntent))
}

func mB(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
