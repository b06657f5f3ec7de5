//go:build linux

package supervise

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// TestPlantedLinks: a symlink planted in the state dir where the
// supervisor keeps its files — procs or logs swapped for a link to a
// directory elsewhere, a process's log or status swapped for a link to a
// file elsewhere, a spec that is a link to one — is refused with an error
// that names it, never written or read through: nothing outside the state
// dir is created or changed, whatever the supervisor (re-executed, as
// sync's, or hosted, as the agent's) and the starter do next. The
// supervisor reports it, and goes on supervising where it can.
func TestPlantedLinks(t *testing.T) {
	supervisorModes(t, func(t *testing.T, hosted bool) {
		for _, kind := range []string{"procs", "logs", "log", "status", "spec"} {
			t.Run(kind, func(t *testing.T) { plantedLink(t, hosted, kind) })
		}
	})
}

func plantedLink(t *testing.T, hosted bool, kind string) {
	st8, spec := newSpec(t, "loop", "sh", "-c", "while :; do echo tick; sleep 0.05; done")
	var h *Host
	if hosted {
		h = host(t, st8)
	}
	spec.Backoff = Backoff{MinUptime: 100 * time.Millisecond}
	if _, err := Run(st8, spec); err != nil {
		t.Fatal(err)
	}
	first := running(t, st8, "loop")
	procs, logs := procsDir(st8), filepath.Dir(spec.LogFile)
	supLog := supervisorLog(st8)

	victim := t.TempDir() // elsewhere: nothing may land or change here
	precious := filepath.Join(victim, "file")
	if err := os.WriteFile(precious, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer func() { // whatever else failed
		if b, _ := os.ReadFile(precious); string(b) != "precious\n" {
			t.Errorf("%s, outside the state dir, was written: %q", precious, b)
		}
		entries, _ := os.ReadDir(victim)
		for _, e := range entries {
			if e.Name() != "file" && e.Name() != "evil.spec" {
				t.Errorf("%s was made outside the state dir", filepath.Join(victim, e.Name()))
			}
		}
	}()
	swapDir := func(dir string) string {
		if err := os.Rename(dir, dir+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, dir); err != nil {
			t.Fatal(err)
		}
		// Put back before the supervisor hands over and the state dir's
		// cleanup stops what runs.
		t.Cleanup(func() { os.Remove(dir); os.Rename(dir+".old", dir) })
		return dir
	}
	swapFile := func(file string) string {
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(precious, file); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(file) })
		return file
	}
	said := func(what ...string) {
		t.Helper()
		eventually(t, 10*time.Second, "the supervisor never said "+strings.Join(what, " … "), func() bool {
			b, _ := os.ReadFile(supLog)
			for _, l := range strings.Split(string(b), "\n") {
				if !slices.ContainsFunc(what, func(w string) bool { return !strings.Contains(l, w) }) {
					return true
				}
			}
			return false
		})
	}
	refused := func(err error, path string) {
		t.Helper()
		if !errors.Is(err, state.ErrSymlink) || !strings.Contains(err.Error(), path) {
			t.Errorf("got %v, want an error naming %s that wraps state.ErrSymlink", err, path)
		}
	}
	kill := func() { syscall.Kill(first.Process.PID, syscall.SIGKILL) }
	restarted := func(log string) {
		t.Helper()
		eventually(t, 10*time.Second, "the process was not restarted", func() bool {
			b, _ := os.ReadFile(log)
			return strings.Contains(string(b), "killed by SIGKILL") && strings.Contains(string(b), "restarting")
		})
	}
	failed := func(path string) {
		t.Helper()
		var st *Status
		eventually(t, 10*time.Second, "the process never failed to start", func() bool {
			st, _ = Read(st8, "loop")
			return st != nil && st.State == Failed
		})
		if !strings.Contains(st.StartError, path) || !strings.Contains(st.StartError, state.ErrSymlink.Error()) {
			t.Errorf("start error %q, want it to name %s and the symlink", st.StartError, path)
		}
	}

	switch kind {
	case "procs":
		swapDir(procs)
		said(procs, state.ErrSymlink.Error())
		kill()
		restarted(spec.LogFile) // supervised still, from memory
		_, err := Run(st8, spec)
		refused(err, procs)
		if h != nil { // the agent leaving: no supervisor could take them on
			refused(h.Handover(), procs)
		}
	case "logs":
		swapDir(logs)
		kill()
		failed(logs)
		_, err := Run(st8, spec)
		refused(err, logs)
	case "log":
		swapFile(spec.LogFile)
		kill()
		failed(spec.LogFile)
		_, err := ReadLog(spec.LogFile)
		refused(err, spec.LogFile)
		_, err = Tail(spec.LogFile, 10)
		refused(err, spec.LogFile)
	case "status":
		file := swapFile(statusFile(procs, "loop"))
		kill()
		restarted(spec.LogFile)
		said("loop: write status", file, state.ErrSymlink.Error())
		_, err := Read(st8, "loop")
		refused(err, file)
		_, err = Run(st8, spec)
		refused(err, file)
		if fi, err := os.Lstat(file); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the planted %s was replaced", file)
		}
	case "spec":
		// A spec read through a link would run what it says, as root.
		evil := spec
		evil.Name, evil.ID, evil.Cgroup = "evil", "Process/evil", ""
		evil.Command = []string{"touch", filepath.Join(victim, "pwned")}
		evil.LogFile, _ = Files(st8, "evil")
		b, _ := json.Marshal(evil)
		if err := os.WriteFile(filepath.Join(victim, "evil.spec"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		link := specFile(procs, "evil")
		if err := os.Symlink(filepath.Join(victim, "evil.spec"), link); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(link) })
		if _, err := Restart(st8, "loop"); err != nil { // wakes the supervisor: it reads every spec
			t.Fatal(err)
		}
		said("evil:", link, state.ErrSymlink.Error())
		if st, _ := Read(st8, "evil"); st != nil {
			t.Errorf("the linked spec was acted upon: %+v", st)
		}
	}
}
