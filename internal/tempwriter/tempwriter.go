// Package tempwriter runs a real writer of temp files for tests of who may
// sweep them: a process, started from the test binary, that creates a temp
// file the way every write of cortex-sync's does and holds it until it is
// killed. A test binary that uses Start names a test that calls Helper.
package tempwriter

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

const env = "CORTEX_SYNC_TEMP_WRITER"

// Writer is a process writing one temp file.
type Writer struct {
	PID  int
	Temp string // the temp file's path
	cmd  *exec.Cmd
	in   io.Closer
}

// Start runs the test binary's test helper (a test that calls Helper) as
// a writer of a temp file beside name in dir, and returns once the file
// exists. The process is killed when the test ends.
func Start(t testing.TB, helper, dir, name string) *Writer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+dir+string(filepath.ListSeparator)+name)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &Writer{PID: cmd.Process.Pid, cmd: cmd, in: in}
	t.Cleanup(func() { w.Kill() })
	line, err := bufio.NewReader(out).ReadString('\n')
	tmp, ok := strings.CutPrefix(strings.TrimSpace(line), "temp ")
	if err != nil || !ok {
		t.Fatalf("temp writer: %q, %v", line, err)
	}
	w.Temp = filepath.Join(dir, tmp)
	return w
}

// Kill ends the writer with SIGKILL, as a kill mid-write would, and reaps
// it: its temp file stays behind.
func (w *Writer) Kill() {
	if w.cmd.ProcessState != nil {
		return
	}
	w.cmd.Process.Signal(syscall.SIGKILL)
	w.in.Close()
	w.cmd.Wait()
}

// Helper is the writer's side; the helper test calls it first and returns
// when it does. It creates the temp file, says its name and waits to be
// killed (or for its stdin to close).
func Helper() {
	v, ok := os.LookupEnv(env)
	if !ok {
		return // run as a test, not as a writer
	}
	dir, name, _ := strings.Cut(v, string(filepath.ListSeparator))
	d, err := hostfs.OpenOwned(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	f, tmp, err := d.CreateTemp(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	f.WriteString("half written")
	fmt.Printf("temp %s\n", tmp)
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}
