//go:build crash || faults

package crashtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// bin is the cortex-sync binary under test, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cortex-sync-crashtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bin = filepath.Join(dir, "cortex-sync")
	// -tags crash: the kill points of a revision's life (CORTEX_SYNC_KILL_AT).
	build := exec.Command("go", "build", "-tags", "crash", "-o", bin, "github.com/cortex-sync/cortex-sync/cmd/cortex-sync")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build cortex-sync:", err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sandbox is one host under test: a root, a state dir, and a source
// directory reached through a symlink, so that switching the desired state
// between versions never reads as a change of source.
type sandbox struct {
	t     testing.TB
	work  string
	Root  string
	State string
	Repo  string // the symlink the source flags name
	// src are the source flags (default --dir Repo); cred, when set, runs
	// cortex-sync as another user.
	src  []string
	cred *syscall.Credential
}

func newSandbox(t testing.TB) *sandbox {
	work := t.TempDir()
	s := &sandbox{t: t, work: work, Root: filepath.Join(work, "root"), State: filepath.Join(work, "state"), Repo: filepath.Join(work, "repo")}
	s.src = []string{"--dir", s.Repo}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

// reset empties the root and the state dir.
func (s *sandbox) reset() {
	s.t.Helper()
	for _, d := range []string{s.Root, s.State} {
		if err := os.RemoveAll(d); err != nil {
			s.t.Fatal(err)
		}
	}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		s.t.Fatal(err)
	}
}

// point makes the source symlink name dir.
func (s *sandbox) point(dir string) {
	s.t.Helper()
	tmp := s.Repo + ".new"
	os.Remove(tmp)
	if err := os.Symlink(dir, tmp); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, s.Repo); err != nil {
		s.t.Fatal(err)
	}
}

// args are the flags every command gets.
func (s *sandbox) args(verb string, extra ...string) []string {
	a := []string{verb, "--root", s.Root, "--state-dir", s.State}
	if verb != "status" && verb != "state" {
		a = append(a, s.src...)
	}
	return append(a, extra...)
}

func (s *sandbox) command(verb string, extra ...string) *exec.Cmd {
	cmd := exec.Command(bin, s.args(verb, extra...)...)
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
		cmd.Env = append(os.Environ(), "HOME="+s.work)
	}
	return cmd
}

// run runs cortex-sync to the end and returns its exit code and output.
func (s *sandbox) run(verb string, extra ...string) (int, string) {
	s.t.Helper()
	cmd := s.command(verb, extra...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	s.t.Fatalf("run cortex-sync %s: %v", verb, err)
	return -1, ""
}

// mustRun runs cortex-sync and fails the test unless it exits 0.
func (s *sandbox) mustRun(verb string, extra ...string) string {
	s.t.Helper()
	code, out := s.run(verb, extra...)
	if code != 0 {
		s.t.Fatalf("cortex-sync %s exited %d:\n%s", strings.Join(s.args(verb, extra...), " "), code, tail(out, 40))
	}
	return out
}

// converged checks that diff --exit-code finds nothing to do.
func (s *sandbox) converged() error {
	code, out := s.run("diff", "--exit-code")
	if code != 0 {
		return fmt.Errorf("diff --exit-code exited %d after a full sync:\n%s", code, tail(out, 20))
	}
	return nil
}

// killAfter starts cortex-sync and SIGKILLs it after d; it reports
// whether the kill came before the command ended by itself.
func (s *sandbox) killAfter(d time.Duration, verb string, extra ...string) (killed bool, out string) {
	s.t.Helper()
	cmd := s.command(verb, extra...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return false, buf.String()
	case <-time.After(d):
	}
	cmd.Process.Kill()
	<-done
	return true, buf.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// temps lists the temporary files of cortex-sync's below dir: names
// hostfs.IsTemp knows, in the root, the mirrors and the state dir.
func temps(dir string) []string {
	var found []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && hostfs.IsTemp(d.Name()) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// regularFiles maps every regular file below root (as an in-root path) to
// the SHA-256 of its content.
func regularFiles(root string) (map[string]string, error) {
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files["/"+filepath.ToSlash(rel)] = sum(data)
		return nil
	})
	return files, err
}

// loads checks that the snapshot and every tree index load.
func (s *sandbox) loads() (*state.Snapshot, error) {
	snap, err := state.At(s.State).Load()
	if err != nil {
		return nil, err
	}
	idx, _ := filepath.Glob(filepath.Join(s.State, "trees", "*.idx"))
	for _, p := range idx {
		if hostfs.IsTemp(filepath.Base(p)) {
			continue // a write's temp file, cut short by the kill: no index
		}
		if _, err := index.Load(state.At(s.State).File("trees/" + filepath.Base(p))); err != nil {
			return nil, err
		}
	}
	return snap, nil
}

// backedUp reports whether some backup run holds content at in-root path p.
func (s *sandbox) backedUp(p, content string) bool {
	runs, _ := filepath.Glob(filepath.Join(s.State, "backups", "*"))
	for _, run := range runs {
		data, err := os.ReadFile(filepath.Join(run, filepath.FromSlash(p)))
		if err == nil && string(data) == content {
			return true
		}
	}
	return false
}

// writeTree makes dir hold exactly files (slash paths relative to dir).
func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	made := map[string]bool{}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if d := filepath.Dir(p); !made[d] {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			made[d] = true
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
