package state

import (
	"os"
	"syscall"
	"time"
)

// Stamp tells whether state.json changed since it was read or written:
// any writer's save renames a new file over it, so its inode moves.
type Stamp struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

// Stamp is state.json's stamp now; the zero Stamp when there is none.
func (d Dir) Stamp() Stamp {
	fi, err := os.Stat(d.file())
	if err != nil {
		return Stamp{}
	}
	s := Stamp{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(st.Dev), st.Ino
	}
	return s
}
