package state

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// unnamedFile is a new file in dir that has no name, so that nothing is
// left behind whatever happens to this process.
func unnamedFile(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return namedThenRemoved(dir) // a filesystem without O_TMPFILE
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, "(unnamed)")), nil
}
