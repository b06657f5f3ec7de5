//go:build linux

package supervise

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// CgroupEnv overrides where process cgroups go: "off" runs every process
// in its process group only; a directory inside a cgroup v2 hierarchy
// (one delegated to the agent's systemd unit, say) is used as the parent.
const CgroupEnv = "CORTEX_SYNC_CGROUP"

// CgroupBase is the directory under which this state dir's processes get
// a cgroup each: $CORTEX_SYNC_CGROUP, else <the cgroup2 mount>/cortex-sync/<state
// hash>. It is made here, which proves it writable. When no cgroup can be
// made, dir is empty and why says so.
func CgroupBase(stateDir string) (dir, why string) {
	base := os.Getenv(CgroupEnv)
	switch {
	case base == "off":
		return "", "cgroups turned off (" + CgroupEnv + "=off)"
	case base == "":
		mount := cgroup2Mount()
		if mount == "" {
			return "", "no cgroup v2 hierarchy is mounted"
		}
		base = filepath.Join(mount, "cortex-sync")
	}
	dir = filepath.Join(base, stateHash(stateDir))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "no writable cgroup v2 hierarchy: " + err.Error()
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return "", dir + " is not a cgroup v2 directory"
	}
	return dir, ""
}

// cgroup2Mount is where the unified (v2) hierarchy is mounted, from
// /proc/self/mountinfo: /sys/fs/cgroup on a pure v2 host,
// /sys/fs/cgroup/unified on a hybrid one.
func cgroup2Mount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4]
			}
		}
	}
	return ""
}

// cgroup is one process's cgroup directory.
type cgroup string

// setup makes the cgroup and applies the limits it can; note names the
// limits that could not be, for the status.
func (c cgroup) setup(r Resources) (note string, err error) {
	if err := os.MkdirAll(string(c), 0o755); err != nil {
		return "", err
	}
	want := map[string]string{}
	if r.Memory > 0 {
		want["memory"] = "memory.max=" + strconv.FormatInt(r.Memory, 10)
	}
	if r.MilliCPU > 0 {
		want["cpu"] = fmt.Sprintf("cpu.max=%d 100000", r.MilliCPU*100)
	}
	if r.Tasks > 0 {
		want["pids"] = "pids.max=" + strconv.FormatInt(r.Tasks, 10)
	}
	if len(want) == 0 {
		return "", nil
	}
	var missing []string
	for ctl, setting := range want {
		c.enable(ctl)
		file, value, _ := strings.Cut(setting, "=")
		if err := os.WriteFile(filepath.Join(string(c), file), []byte(value), 0o644); err != nil {
			missing = append(missing, ctl)
		}
	}
	if len(missing) > 0 {
		return "limits not applied: no " + strings.Join(slices.Sorted(slices.Values(missing)), ", ") + " controller here", nil
	}
	return "", nil
}

// enable turns a controller on in every ancestor's subtree_control, from
// the top, as far as it is available.
func (c cgroup) enable(ctl string) {
	mount := cgroup2Mount()
	rel, err := filepath.Rel(mount, filepath.Dir(string(c)))
	if err != nil || strings.HasPrefix(rel, "..") {
		return
	}
	dir := mount
	parts := []string{""}
	if rel != "." {
		parts = append(parts, strings.Split(rel, "/")...)
	}
	for _, p := range parts {
		dir = filepath.Join(dir, p)
		have, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		if !hasWord(have, ctl) {
			return
		}
		on, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if !hasWord(on, ctl) {
			os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+ctl), 0o644)
		}
	}
}

func hasWord(b []byte, w string) bool {
	for _, f := range bytes.Fields(b) {
		if string(f) == w {
			return true
		}
	}
	return false
}

// open returns a descriptor of the directory, for CLONE_INTO_CGROUP.
func (c cgroup) open() (int, error) {
	return unix.Open(string(c), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// populated reports whether any process is in the cgroup (or below it).
func (c cgroup) populated() bool {
	b, err := os.ReadFile(filepath.Join(string(c), "cgroup.events"))
	if err != nil {
		return len(c.procs()) > 0
	}
	return bytes.Contains(b, []byte("populated 1"))
}

// procs lists the processes in the cgroup and below it (its runs).
func (c cgroup) procs() []int {
	b, err := os.ReadFile(filepath.Join(string(c), "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			pids = append(pids, pid)
		}
	}
	for _, child := range c.children() {
		pids = append(pids, child.procs()...)
	}
	return pids
}

// children are the cgroups directly below c.
func (c cgroup) children() []cgroup {
	entries, _ := os.ReadDir(string(c))
	var out []cgroup
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, cgroup(filepath.Join(string(c), e.Name())))
		}
	}
	return out
}

// A process runs in a cgroup of its own run, made fresh below its unit's
// cgroup (which holds the limits) at every start: the kernel (Linux 6.18
// here) kills at once, before its first instruction, a child started with
// CLONE_INTO_CGROUP into a cgroup that cgroup.kill was ever written to,
// even an empty one. So a cgroup that was killed is never started into
// again; a fresh one below a killed parent is fine. Runs are numbered: the
// unit's cgroup web holds web/1, then web/2, each removed once empty.

// newRun makes the cgroup of the unit's next run.
func (c cgroup) newRun() (cgroup, error) {
	if err := os.MkdirAll(string(c), 0o755); err != nil {
		return "", err
	}
	n := 0
	for _, run := range c.children() {
		if i, err := strconv.Atoi(filepath.Base(string(run))); err == nil {
			n = max(n, i)
		}
	}
	for {
		n++
		run := cgroup(filepath.Join(string(c), strconv.Itoa(n)))
		err := os.Mkdir(string(run), 0o755)
		if !errors.Is(err, fs.ErrExist) {
			return run, err
		}
	}
}

// removeRuns deletes the cgroups of the unit's runs that are empty.
func (c cgroup) removeRuns() {
	for _, run := range c.children() {
		if _, err := strconv.Atoi(filepath.Base(string(run))); err == nil {
			unix.Rmdir(string(run))
		}
	}
}

// signal sends sig to every process in the cgroup and below it.
func (c cgroup) signal(sig syscall.Signal) {
	for _, pid := range c.procs() {
		if pid > 1 {
			syscall.Kill(pid, sig)
		}
	}
}

// kill SIGKILLs everything in the cgroup, forks racing it included
// (cgroup.kill; before Linux 5.14, by freezing it first), and waits until
// it is empty, up to timeout.
func (c cgroup) kill(timeout time.Duration) bool {
	if os.WriteFile(filepath.Join(string(c), "cgroup.kill"), []byte("1"), 0o644) != nil {
		freeze := filepath.Join(string(c), "cgroup.freeze")
		os.WriteFile(freeze, []byte("1"), 0o644)
		c.signal(syscall.SIGKILL)
		os.WriteFile(freeze, []byte("0"), 0o644)
	}
	return c.waitEmpty(timeout)
}

// waitEmpty polls until no process is left, up to timeout.
func (c cgroup) waitEmpty(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for c.populated() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// remove deletes the (empty) cgroup with its runs, and its parents up to
// the cortex-sync directory when nothing else is left in them.
func (c cgroup) remove() error {
	if c == "" {
		return nil
	}
	c.removeRuns()
	err := unix.Rmdir(string(c))
	if errors.Is(err, unix.ENOENT) {
		err = nil
	}
	if err == nil && unix.Rmdir(filepath.Dir(string(c))) == nil { // <state hash>
		if top := filepath.Dir(filepath.Dir(string(c))); filepath.Base(top) == "cortex-sync" {
			unix.Rmdir(top)
		}
	}
	return err
}
