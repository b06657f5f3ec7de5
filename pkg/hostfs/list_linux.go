package hostfs

import (
	"encoding/binary"
	"io/fs"

	"golang.org/x/sys/unix"
)

// list reads the directory with getdents64 on its own descriptor, from
// the start (the offset is the descriptor's: Dup opens the directory
// anew rather than sharing it), rewound when an earlier List moved it. A
// descriptor getdents cannot read (O_PATH) is read through a fresh one.
func (d *Dir) list(l *listing) error {
	fd := d.fd
	if d.listed {
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			fd = -1
		}
	}
	d.listed = true
	for {
		if fd < 0 {
			var err error
			if fd, err = openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC); err != nil {
				return err
			}
			defer unix.Close(fd)
		}
		n, err := unix.Getdents(fd, l.buf)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EBADF && fd == d.fd:
			fd = -1 // not open for reading: nothing was read from it
			continue
		case err != nil:
			return err
		case n <= 0:
			return nil
		}
		parseDirents(l, l.buf[:n])
	}
}

// parseDirents adds the linux_dirent64 records in b: d_ino (8 bytes),
// d_off (8), d_reclen (2), d_type (1), then the name, NUL-terminated.
func parseDirents(l *listing, b []byte) {
	for len(b) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(b[16:]))
		if reclen < 19 || reclen > len(b) {
			return
		}
		rec := b[:reclen]
		b = b[reclen:]
		ino := binary.NativeEndian.Uint64(rec)
		if ino == 0 {
			continue // a deleted entry some filesystems report
		}
		name := rec[19:]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		typ, known := direntType(rec[18])
		l.add(name, typ, known, ino)
	}
}

func direntType(t byte) (fs.FileMode, bool) {
	switch t {
	case unix.DT_REG:
		return 0, true
	case unix.DT_DIR:
		return fs.ModeDir, true
	case unix.DT_LNK:
		return fs.ModeSymlink, true
	case unix.DT_FIFO:
		return fs.ModeNamedPipe, true
	case unix.DT_SOCK:
		return fs.ModeSocket, true
	case unix.DT_CHR:
		return fs.ModeDevice | fs.ModeCharDevice, true
	case unix.DT_BLK:
		return fs.ModeDevice, true
	}
	return 0, false
}
