package state

import (
	"io"
	"os"
	"path"
)

// OpenLog opens the log name (slash-separated, below d) for appending,
// 0600, making it and the directories above it when missing.
func (d Dir) OpenLog(name string) (*os.File, error) {
	return d.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
}

// CapLog keeps the log name from growing past max bytes: past it, the log
// is copied to name.1 and cut to nothing in place (logrotate's
// copytruncate), so that a process appending to it goes on appending to
// the same file.
func (d Dir) CapLog(name string, max int64) error {
	h, base, err := d.existing(name)
	if h == nil {
		return err
	}
	defer h.Close()
	st, err := h.Lstat(base)
	if err != nil || !st.Mode.IsRegular() || st.Size <= max {
		return nil
	}
	src, err := h.OpenFile(base, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, tmp, err := h.CreateTemp(path.Base(name) + ".1")
	if err != nil {
		return err
	}
	defer h.Remove(tmp) // gone already once renamed
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = h.Rename(tmp, base+".1")
	}
	if err != nil {
		return err
	}
	return src.Truncate(0)
}
