package index

import (
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
