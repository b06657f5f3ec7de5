package index

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// BenchmarkLoadIndex loads the index of an 11,500-file tree, the size of
// GOROOT/src, as a process that loaded it before does: the base is known
// to be whole (JSON for as many entries costs about 35 ms).
func BenchmarkLoadIndex(b *testing.B) {
	p := benchIndex(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(fileAt(p)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadIndexCold loads it as a one-shot command did before a
// check was noted (and as the first after a save does), the base checked
// whole (checksums, rows, strings, order).
func BenchmarkLoadIndexCold(b *testing.B) {
	p := benchIndex(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := load(fileAt(p), trust{whole: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadIndexNoted loads it as each one-shot command does: in a
// fresh process, trusting the note of the last check.
func BenchmarkLoadIndexNoted(b *testing.B) {
	p := benchIndex(b)
	time.Sleep(2 * racyMargin)
	if _, err := Load(fileAt(p)); err != nil { // checks and notes
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		forgetChecks()
		if _, err := Load(fileAt(p)); err != nil {
			b.Fatal(err)
		}
	}
}

func benchIndex(b *testing.B) string {
	x := New()
	for i := range 11500 {
		x.Set("src/pkg"+strconv.Itoa(i/40)+"/file"+strconv.Itoa(i)+".go", &Entry{
			Stat:      hostfs.Stat{Ino: uint64(i), Size: 12345, Mtime: 1 << 60, Ctime: 1 << 60, Mode: 0o644},
			SHA256:    strings.Repeat("ab", 32),
			ContentID: "git:" + strings.Repeat("cd", 20),
		})
	}
	p := filepath.Join(b.TempDir(), "x.idx")
	if err := x.Save(fileAt(p)); err != nil {
		b.Fatal(err)
	}
	// Older than the racy margin, as an index loaded by the next command is.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkHealLookup is an agent's look-up for one event at 10,000,
// 100,000 and 1,000,000 entries (about 50 files a directory): the index
// loaded as the process loaded it before, the event's directory listed
// and its file found. Its cost should not grow with the tree; "nosparse"
// is the search without the sparse index, halving the whole base.
func BenchmarkHealLookup(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		p := benchTree(b, n)
		for _, sparse := range []bool{true, false} {
			name := fmt.Sprintf("files=%d", n)
			if !sparse {
				name += "/nosparse"
			}
			b.Run(name, func(b *testing.B) {
				if !sparse {
					defer func(was int) { sparseStep = was }(sparseStep)
					sparseStep = 0
				}
				rng := rand.New(rand.NewPCG(7, 8))
				var k Kids
				// The first look-up of the process reads the sparse index.
				if x, err := Load(fileAt(p)); err == nil {
					x.ChildrenOf("kb", &k)
				}
				b.ReportAllocs()
				reads := 0
				for b.Loop() {
					x, err := Load(fileAt(p))
					if err != nil {
						b.Fatal(err)
					}
					i := rng.IntN(n)
					dir, file := benchPath(i)
					x.ChildrenOf(dir, &k)
					if _, ok := k.Find(file); !ok || x.Get(dir+"/"+file) == nil {
						b.Fatalf("%s/%s not found", dir, file)
					}
					reads += x.base.cache.reads
				}
				// Blocks read a look-up: what a busy machine does not blur.
				b.ReportMetric(float64(reads)/float64(b.N), "blocks/op")
			})
		}
	}
}

// benchPath is the directory and name of file i of a tree of benchTree's
// shape: 50 files a directory, directories three deep.
func benchPath(i int) (dir, name string) {
	d := i / 50
	return fmt.Sprintf("kb/d%02d/d%02d/d%04d", d%20, d/20%20, d), fmt.Sprintf("note%02d.md", i%50)
}

// benchTree saves an index of n files once per size (in the package's
// temporary directory, reused by the runs of a benchmark).
func benchTree(b *testing.B, n int) string {
	p := filepath.Join(os.TempDir(), fmt.Sprintf("cortex-sync-bench-index-%d.idx", n))
	if _, err := os.Stat(p); err == nil {
		return p
	}
	x := NewAt(fileAt(p))
	for i := range n {
		dir, name := benchPath(i)
		x.Set(dir+"/"+name, &Entry{
			Stat:      hostfs.Stat{Ino: uint64(i), Size: 12345, Mtime: 1 << 60, Ctime: 1 << 60, Mode: 0o644},
			SHA256:    fmt.Sprintf("%064x", i),
			ContentID: fmt.Sprintf("git:%040x", i),
		})
	}
	if err := x.Save(fileAt(p)); err != nil {
		b.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		b.Fatal(err)
	}
	return p
}
