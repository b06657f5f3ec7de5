//go:build !linux

package index

import "syscall"

// ctimeOf is a stat's ctime, in nanoseconds.
func ctimeOf(st *syscall.Stat_t) int64 { return st.Ctimespec.Nano() }
