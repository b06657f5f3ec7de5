package hostfs

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"sync"

	"golang.org/x/sys/unix"
)

// hashBufs are the read buffers of HashFile: hashing ten thousand files
// allocates none after the first few.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// HashFile is the SHA-256 (hex) of the regular file name, read through the
// directory's descriptor without following a symlink. size is what an
// lstat of it just found (-1: not known): a read that comes short with
// that many bytes read is the end of the file, without the read that
// would find the end (a file of another size is read to its end).
func (d *Dir) HashFile(name string, size int64) (string, error) {
	fd, err := openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return "", d.pathErr("open", name, err)
	}
	defer unix.Close(fd)
	bp := hashBufs.Get().(*[]byte)
	defer hashBufs.Put(bp)
	h := sha256.New()
	for read := int64(0); ; {
		n, err := unix.Read(fd, *bp)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", d.pathErr("read", name, err)
		}
		if n == 0 {
			break
		}
		h.Write((*bp)[:n])
		if read += int64(n); read == size && n < len(*bp) {
			break
		}
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])), nil
}

// OpenDirRel opens the directory rel below d (slash-separated, several
// elements) in one call, refusing symlinks on the way and any escape.
func (d *Dir) OpenDirRel(rel string) (*Dir, error) {
	fd, err := openBeneath(d.fd, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, d.pathErr("open", rel, err)
	}
	return &Dir{root: d.root, fd: fd, path: path.Join(d.path, rel)}, nil
}

func openat(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
