package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
)

var explainCommits = flag.Int("explain.commits", 999, "commits after the mirror's in BenchmarkExplain's history")

// BenchmarkExplain is explain on a host that mirrors GOROOT/src (about
// eleven thousand files) from Git, after 999 more commits that changed
// nothing it mirrors: the walk for a mirrored file's last change reads
// as many as it may (explain.HistoryLimit, 1000), its worst case. A mirror entry, an unmanaged path inside the mirror, and
// -o json in-process (a run of the command minus the exec), and the
// command as a process of its own; the CPU per answer beside the wall
// time. The target is 50 ms an answer.
//
//	go test ./cmd/cortex-sync -run '^$' -bench Explain -benchtime 20x
func BenchmarkExplain(b *testing.B) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skip("go env GOROOT:", err)
	}
	goroot := filepath.Join(strings.TrimSpace(string(out)), "src")
	repo := gittest.NewRepo(b)
	if out, err := exec.Command("cp", "-a", goroot, filepath.Join(repo.Dir, "kb")).CombinedOutput(); err != nil {
		b.Fatalf("copy %s: %v: %s", goroot, err, out)
	}
	repo.Commit("GOROOT/src", map[string]*string{
		"manifests/kb.yaml": gittest.S("apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: ../kb}\n"),
	})
	url, _ := repo.Daemon(b)
	work := b.TempDir()
	root, stateDir := filepath.Join(work, "root"), filepath.Join(work, "state")
	os.MkdirAll(root, 0o755)
	cs := func(b *testing.B, args ...string) string {
		b.Helper()
		var out bytes.Buffer
		if code := run(context.Background(), args, nil, &out, &out); code != 0 {
			b.Fatalf("cortex-sync %s: exit %d:\n%s", strings.Join(args, " "), code, out.String())
		}
		return out.String()
	}
	sync := func() {
		cs(b, "sync", "--repo", url, "--branch", "main", "--path", "manifests", "--root", root, "--state-dir", stateDir, "--fetch-timeout", "10m")
	}
	sync()
	notes := filepath.Join(repo.Dir, "NOTES")
	for i := range *explainCommits {
		if err := os.WriteFile(notes, []byte(strconv.Itoa(i)+"\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		repo.Git("-C", repo.Dir, "add", "NOTES")
		repo.Git("-C", repo.Dir, "commit", "-q", "-m", "notes "+strconv.Itoa(i))
	}
	sync()
	mirrored := filepath.Join(root, "srv/kb/net/http/server.go")
	if err := os.WriteFile(filepath.Join(root, "srv/kb/net/http/mine.txt"), []byte("mine\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	files, _ := exec.Command("sh", "-c", "find "+filepath.Join(root, "srv/kb")+" -type f | wc -l").Output()
	b.Logf("mirror: %s files", strings.TrimSpace(string(files)))
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"mirror-entry", []string{mirrored}, "a mirror entry of /srv/kb"},
		{"unmanaged-in-mirror", []string{filepath.Join(root, "srv/kb/net/http/mine.txt")}, "Inside:"},
		{"json", []string{"-o", "json", mirrored}, `"walked": 1000`},
	} {
		b.Run(c.name, func(b *testing.B) {
			args := append([]string{"explain", "--root", root, "--state-dir", stateDir}, c.args...)
			if got := cs(b, args...); !strings.Contains(got, c.want) {
				b.Fatalf("explain: no %q in:\n%s", c.want, got)
			}
			var before, after syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			start := time.Now()
			for b.Loop() {
				cs(b, args...)
			}
			wall := time.Since(start)
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(wall.Microseconds())/1000/float64(b.N), "wall-ms/op")
		})
	}
	// The command as a person runs it: the binary (go build), its start
	// included; beside it, the start alone (version).
	bin := filepath.Join(b.TempDir(), "cortex-sync")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v:\n%s", err, out)
	}
	b.Run("process-version", func(b *testing.B) {
		for b.Loop() {
			if out, err := exec.Command(bin, "version").CombinedOutput(); err != nil {
				b.Fatalf("version: %v:\n%s", err, out)
			}
		}
	})
	b.Run("process", func(b *testing.B) {
		var cpu time.Duration
		start := time.Now()
		for b.Loop() {
			cmd := exec.Command(bin, "explain", "--root", root, "--state-dir", stateDir, mirrored)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("explain: %v:\n%s", err, out)
			}
			cpu += time.Duration(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime())
		}
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "wall-ms/op")
	})
}
