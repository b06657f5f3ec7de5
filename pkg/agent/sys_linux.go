package agent

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pidfdOpen opens a descriptor that polls readable when pid exits.
func pidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }

// ctime is a file's status change time.
func ctime(st *syscall.Stat_t) time.Time { return time.Unix(st.Ctim.Sec, st.Ctim.Nsec) }
