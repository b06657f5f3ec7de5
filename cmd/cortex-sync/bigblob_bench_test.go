package main

import (
	"bufio"
	"flag"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
)

var bigBlob = flag.Int64("bigblob.size", 1<<30, "bytes of the large blob BenchmarkPeakRSS serves from Git")

// BenchmarkPeakRSS is the peak RSS of `cortex-sync sync` (a child process:
// its ru_maxrss) while it takes a large blob from git daemon: mirroring it
// in a Directory; mirroring its next version, a delta on the first in the
// same pack (a full fetch, pinned with --commit: go-git never asks for
// thin packs); and refusing a manifest of the same size. The memory taken
// must not grow with the blob (a target of 64 MB at 1 GiB).
//
//	go test ./cmd/cortex-sync -run '^$' -bench PeakRSS -benchtime 1x [-bigblob.size N]
func BenchmarkPeakRSS(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(b.TempDir(), "cortex-sync")
	if err := os.Symlink(exe, bin); err != nil {
		b.Fatal(err)
	}
	repo := gittest.NewRepo(b)
	// Lightly compressed, so the setup stays quick; and never too big for
	// git to send as a delta, so the next revision is one.
	repo.Git("-C", repo.Dir, "config", "core.compression", "1")
	repo.Git("-C", repo.Dir, "config", "core.bigFileThreshold", "8g")
	big := filepath.Join(repo.Dir, "kb", "big.bin")
	writeRandom(b, big, *bigBlob, 1)
	repo.Commit("kb", map[string]*string{
		"kb.yaml": gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n"),
	})
	// Packed once, deltas found once: git daemon then sends what it has.
	repack := func() { repo.Git("-C", repo.Dir, "repack", "-a", "-d", "-q") }
	repack()
	url, _ := repo.Daemon(b)
	work := b.TempDir()
	sync := func(b *testing.B, want int, args ...string) {
		b.Helper()
		cmd := exec.Command(bin, append([]string{"sync", "--repo", url, "--branch", "main", "--root", filepath.Join(work, "root"), "--state-dir", filepath.Join(work, "state"), "--fetch-timeout", "30m"}, args...)...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != want {
			b.Fatalf("sync exited %d (%v), want %d:\n%s", code, err, want, out.String())
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		b.ReportMetric(float64(ru.Maxrss)/1024, "peak-RSS-MB")
		b.ReportMetric(time.Duration(ru.Utime.Nano()+ru.Stime.Nano()).Seconds(), "cpu-s")
		b.Logf("%s: peak RSS %d MB, CPU %.1fs, wall %s", b.Name(), ru.Maxrss/1024, time.Duration(ru.Utime.Nano()+ru.Stime.Nano()).Seconds(), time.Since(start).Round(time.Millisecond))
	}
	reset := func() {
		os.RemoveAll(work)
		os.MkdirAll(filepath.Join(work, "root"), 0o755)
	}
	b.Run("mirror", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			reset()
			b.StartTimer()
			sync(b, 0)
		}
	})
	b.Run("mirror-delta", func(b *testing.B) {
		f, err := os.OpenFile(big, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		f.WriteAt([]byte("a change in the middle"), *bigBlob/2)
		f.Close()
		head := repo.Commit("change", nil)
		repack()
		parent := repo.Git("-C", repo.Dir, "rev-parse", "HEAD~1")
		// git makes one version whole and the other a delta on it: both
		// are mirrored, the second from the cache.
		for b.Loop() {
			b.StopTimer()
			reset()
			b.StartTimer()
			sync(b, 0, "--commit", head)
			sync(b, 0, "--commit", parent)
		}
		b.StopTimer()
		if out, err := exec.Command("sh", "-c", "git verify-pack -v "+filepath.Join(work, "state", "cache", "git-*", "objects", "pack", "*.idx")+" | grep -c 'blob.* 1 [0-9a-f]*$'").Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
			b.Fatalf("the pack holds no delta of the blob (%s, %v): this measures nothing", out, err)
		}
	})
	b.Run("refuse-manifest", func(b *testing.B) {
		writeRandom(b, filepath.Join(repo.Dir, "big.yaml"), *bigBlob, 2)
		repo.Commit("a huge manifest", nil)
		repack()
		for b.Loop() {
			b.StopTimer()
			reset()
			b.StartTimer()
			sync(b, 1)
		}
	})
}

// writeRandom writes size pseudo-random bytes (seeded: the same seed, the
// same bytes) to name.
func writeRandom(b *testing.B, name string, size int64, seed uint64) {
	b.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(name)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	r := rand.NewChaCha8([32]byte{byte(seed)})
	buf := make([]byte, 1<<20)
	for n := int64(0); n < size; n += int64(len(buf)) {
		r.Read(buf)
		if _, err := w.Write(buf[:min(int64(len(buf)), size-n)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
