package state

import "time"

// Stamp tells whether state.json changed since it was read or written:
// any writer's save renames a new file over it, so its inode moves.
type Stamp struct {
	ino   uint64
	size  int64
	mtime time.Time
	ctime int64
}

// Stamp is state.json's stamp now; the zero Stamp when there is none.
func (d Dir) Stamp() Stamp {
	st, err := d.Lstat(snapshotFile)
	if err != nil {
		return Stamp{}
	}
	return Stamp{ino: st.Ino, size: st.Size, mtime: time.Unix(0, st.Mtime), ctime: st.Ctime}
}
