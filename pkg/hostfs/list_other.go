//go:build !linux

package hostfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// list reads the directory through a fresh descriptor and os.File.
func (d *Dir) list(l *listing) error {
	fd, err := openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return err
	}
	for _, e := range entries {
		var ino uint64
		l.add([]byte(e.Name()), e.Type(), true, ino)
	}
	return nil
}
