package state

import (
	"os"

	"golang.org/x/sys/unix"
)

// unnamedFile is a new file in dir that has no name, so that nothing is
// left behind whatever happens to this process.
func unnamedFile(dir Dir) (*os.File, error) {
	h, err := dir.Open(true)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	f, err := h.OpenFile(".", unix.O_TMPFILE|unix.O_RDWR, 0o600)
	if err != nil {
		return namedThenRemoved(h) // a filesystem without O_TMPFILE
	}
	return f, nil
}
