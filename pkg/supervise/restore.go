//go:build linux

package supervise

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// The state dir removed under a running supervisor (rm -rf, or moved
// away) takes nothing down. Its lock does not live only in the state dir
// (dirLock), so no second supervisor starts beside it. It notices that its
// procs directory is gone or is another one, on every tick and before
// every scan (a scan of a new, empty procs directory would read every spec
// as removed and stop every process), and makes again what it needs from
// what it holds in memory: the procs directory and its lock, procs/.shim,
// each unit's spec and status, the logs; and says so, once. A process's
// output still goes to the removed log file until it restarts: the
// supervisor copies it over to the new log as it comes (and empties the
// old file, which no one else sees any more).

// dirID names a directory for good: its device and inode.
type dirID struct{ dev, ino uint64 }

// idOf names dir; a symlink planted in its place is not it (nor any
// directory: restore refuses it).
func idOf(dir string) (dirID, bool) {
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return dirID{}, false
	}
	return dirID{uint64(st.Dev), st.Ino}, true
}

// intact reports whether the procs directory is still the one the
// supervisor locked; if not, it makes it again (restore) and reports
// whether that worked. Nothing is scanned while it is not.
func (s *supervisor) intact() bool {
	if id, ok := idOf(s.procs); ok && id == s.dir {
		return true
	}
	return s.restore()
}

func (s *supervisor) restore() bool {
	if _, ok := idOf(s.procs); !ok && len(s.units) == 0 {
		return false // nothing to keep: the state dir stays gone until a starter makes it
	}
	if err := makeDir(s.procs); errors.Is(err, state.ErrSymlink) {
		s.sayOnce("the state dir's procs directory %s is a symlink now, which the supervisor never follows: %v; it supervises what it holds in memory meanwhile", s.procs, err)
		return false
	} else if err != nil {
		s.sayOnce("the state dir's procs directory %s was removed or moved away under the supervisor and cannot be made again: %v", s.procs, err)
		return false
	}
	if ok, err := s.lk.tryFile(); !ok {
		s.sayOnce("the state dir's procs directory %s was removed or moved away under the supervisor; another process holds the lock of the new one (%v)", s.procs, err)
		return false
	}
	s.dir, _ = idOf(s.procs)
	s.relog()
	s.announce("running")
	for _, u := range s.units {
		u.restore()
	}
	s.said = ""
	n := fmt.Sprintf("the %d processes it supervises, which ran on", len(s.units))
	if len(s.units) == 1 {
		n = "the process it supervises, which ran on"
	}
	s.say("the state dir's procs directory %s was removed or moved away under the supervisor: made it again, with the spec and status of %s", s.procs, n)
	return true
}

// sayOnce says a line unless it said the same last time: a restore that
// fails is tried again every second.
func (s *supervisor) sayOnce(format string, args ...any) {
	if line := fmt.Sprintf(format, args...); line != s.said {
		s.said = line
		s.say("%s", line)
	}
}

// relog opens the supervisor's log again where it was: the re-executed
// supervisor's stderr is that file, so a panic goes there too.
func (s *supervisor) relog() {
	f, err := openLog(supervisorLog(filepath.Dir(s.procs)))
	if err != nil {
		return
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if s.log == os.Stderr {
		unix.Dup3(int(f.Fd()), 2, 0)
		f.Close()
		return
	}
	s.log.Close()
	s.log = f
}

// restore writes the unit's spec (unless a starter wrote a newer one
// already) and status into the new procs directory, and opens its log
// again.
func (u *unit) restore() {
	u.mu.Lock()
	spec := *u.spec
	u.mu.Unlock()
	if err := putJSON(specFile(u.s.procs, u.name), &spec, false); err != nil {
		u.s.say("%s: write the spec again: %v", u.name, err)
	}
	u.update(func(*Status) {})
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.log == nil {
		return
	}
	if u.st.State == Running && u.orphan == nil {
		// What runs writes to the file u.log holds, removed now.
		u.orphan, _ = os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(u.log.Fd())), os.O_RDWR, 0)
		u.orphanAt = 0
	}
	if f, err := openLog(spec.LogFile); err == nil {
		u.log.Close()
		u.log = f
	}
	u.copyOrphan() // what the removed log held, first
	logLine(u.log, "%s: the state dir was removed or moved away under the supervisor; this log was made again, with what the old one held (the output of pid %d goes on being copied to it until it restarts)", u.name, u.st.Process.PID)
}

// copyOrphan copies what the process wrote to its old log since the last
// copy to the new one. An old log that was removed (no name left) is
// emptied after, as CapLog does a full log; one moved away with the state
// dir is left whole. u.mu is held.
func (u *unit) copyOrphan() {
	if u.orphan == nil || u.log == nil {
		return
	}
	n, err := io.Copy(u.log, io.NewSectionReader(u.orphan, u.orphanAt, 1<<62))
	u.orphanAt += n
	var st unix.Stat_t
	if err == nil && unix.Fstat(int(u.orphan.Fd()), &st) == nil && st.Nlink == 0 && u.orphan.Truncate(0) == nil {
		u.orphanAt = 0
	}
}

// dropOrphan stops copying: what runs next writes to the new log. u.mu is
// held.
func (u *unit) dropOrphan() {
	if u.orphan != nil {
		u.copyOrphan()
		u.orphan.Close()
		u.orphan, u.orphanAt = nil, 0
	}
}
