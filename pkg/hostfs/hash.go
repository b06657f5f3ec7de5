package hostfs

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"path"
	"sync"

	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"
)

// hashBufs are the read buffers of HashFile: hashing ten thousand files
// allocates none after the first few.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// xxhs are the XXH3 hashers: each holds a block of its own, 1 KiB, that
// a write of ten thousand files would otherwise allocate anew for each.
// One that an error leaves out is the collector's.
var xxhs = sync.Pool{New: func() any { return xxh3.New() }}

// Sums are a content's digests as an index records them: its SHA-256 in
// hex, and its XXH3-128, the fast hash --verify reads a file by.
type Sums struct {
	SHA256 string
	XXH3   [16]byte
}

// summer digests what is written to it into Sums.
type summer struct {
	sha hash.Hash
	xxh *xxh3.Hasher
}

func newSummer() summer {
	x := xxhs.Get().(*xxh3.Hasher)
	x.Reset()
	return summer{sha: sha256.New(), xxh: x}
}

func (s summer) Write(b []byte) (int, error) {
	s.sha.Write(b)
	return s.xxh.Write(b)
}

// sums ends s: the Sums of what was written.
func (s summer) sums() Sums {
	var sum [sha256.Size]byte
	out := Sums{SHA256: hex.EncodeToString(s.sha.Sum(sum[:0])), XXH3: s.xxh.Sum128().Bytes()}
	xxhs.Put(s.xxh)
	return out
}

// HashFile is the Sums of the regular file name, read through the
// directory's descriptor without following a symlink. size is what an
// lstat of it just found (-1: not known): a read that comes short with
// that many bytes read is the end of the file, without the read that
// would find the end (a file of another size is read to its end).
func (d *Dir) HashFile(name string, size int64) (Sums, error) {
	s := newSummer()
	if err := d.readFile(name, size, s); err != nil {
		return Sums{}, err
	}
	return s.sums(), nil
}

// XXH3File is the XXH3-128 of the regular file name alone, read as
// HashFile reads it.
func (d *Dir) XXH3File(name string, size int64) ([16]byte, error) {
	x := xxhs.Get().(*xxh3.Hasher)
	defer xxhs.Put(x)
	x.Reset()
	if err := d.readFile(name, size, x); err != nil {
		return [16]byte{}, err
	}
	return x.Sum128().Bytes(), nil
}

// readFile writes the regular file name's bytes to w, which takes them
// all (a hash).
func (d *Dir) readFile(name string, size int64, w io.Writer) error {
	fd, err := openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return d.pathErr("open", name, err)
	}
	defer unix.Close(fd)
	bp := hashBufs.Get().(*[]byte)
	defer hashBufs.Put(bp)
	for read := int64(0); ; {
		n, err := unix.Read(fd, *bp)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return d.pathErr("read", name, err)
		}
		if n == 0 {
			return nil
		}
		w.Write((*bp)[:n])
		if read += int64(n); read == size && n < len(*bp) {
			return nil
		}
	}
}

// OpenDirRel opens the directory rel below d (slash-separated, several
// elements) in one call, refusing symlinks on the way and any escape.
func (d *Dir) OpenDirRel(rel string) (*Dir, error) {
	fd, err := openBeneath(d.fd, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, d.pathErr("open", rel, err)
	}
	return d.sub(fd, path.Join(d.path, rel)), nil
}

func openat(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
