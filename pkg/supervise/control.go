package supervise

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Start launches a shim for spec and waits until it reports the process
// running (or already ended). The shim lives in a session of its own and
// outlives the caller.
func Start(spec Spec) (*Status, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	for _, f := range []string{spec.LogFile, spec.StatusFile} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			return nil, err
		}
	}
	os.Remove(spec.StatusFile)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, ShimArg)
	cmd.Args[0] = os.Args[0] // the name this binary was run as
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	// Whatever the shim itself has to say goes to the process's log.
	logf, err := os.OpenFile(spec.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	logf.Close()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("start the shim: %w", err)
	}
	json.NewEncoder(w).Encode(spec)
	w.Close()
	// Reap the shim should it end while this process still runs; after
	// that, whoever adopts it does.
	go cmd.Wait()
	shim := Identity{PID: cmd.Process.Pid}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st, err := ReadStatus(spec.StatusFile)
		if err == nil && st != nil && st.Shim.PID == shim.PID && st.State != "" {
			return st, nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil, errors.New("the shim did not report within 10s")
}

// Stop ends a supervised process: the shim sends the stop signal to the
// process's group and SIGKILL after the stop timeout. Should the shim be
// gone and the process orphaned, the process's group is stopped directly.
func Stop(st *Status, stopSignal syscall.Signal, stopTimeout time.Duration) error {
	if st == nil {
		return nil
	}
	grace := stopTimeout + 5*time.Second
	if st.Shim.Alive() {
		if err := st.Shim.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("signal the shim: %w", err)
		}
		if !st.Shim.WaitGone(grace) {
			return fmt.Errorf("the shim (pid %d) did not stop within %s", st.Shim.PID, grace)
		}
	}
	if st.Process.Alive() {
		st.Process.SignalGroup(stopSignal)
		if !st.Process.WaitGone(stopTimeout) {
			st.Process.SignalGroup(syscall.SIGKILL)
			st.Process.WaitGone(time.Second)
		}
	}
	return nil
}

// LookPath finds a program in the PATH of the environment it will run
// with, not the caller's.
func LookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, dir := range filepath.SplitList(p) {
				full := filepath.Join(dir, name)
				if fi, err := os.Stat(full); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
					return full, nil
				}
			}
		}
	}
	return "", exec.ErrNotFound
}

// capped is a log file that rotates to one ".1" copy when it passes max.
type capped struct {
	mu   sync.Mutex
	path string
	max  int64
	f    *os.File
	size int64
}

func openCapped(path string, max int64) (*capped, error) {
	if max <= 0 {
		max = 10 << 20
	}
	c := &capped{path: path, max: max}
	return c, c.open()
}

func (c *capped) open() error {
	f, err := os.OpenFile(c.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	c.f, c.size = f, fi.Size()
	return nil
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.size+int64(len(p)) > c.max && c.size > 0 {
		c.f.Close()
		os.Rename(c.path, c.path+".1")
		if err := c.open(); err != nil {
			return 0, err
		}
	}
	n, err := c.f.Write(p)
	c.size += int64(n)
	return n, err
}

func (c *capped) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f.Close()
}
