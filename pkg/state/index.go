package state

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// Index maps relative paths to fingerprints: the per-file memory of a
// mirrored tree, or the stat cache of a directory source. It is a compact
// binary file (about 100 bytes an entry) because decoding JSON for ten
// thousand entries costs more than the drift check it serves.
type Index struct {
	Entries map[string]*IndexEntry
	// ref is the index file's mtime when loaded: entries whose timestamps are
	// not older are racily clean (git's rule) and must be hashed.
	ref int64
}

// IndexEntry is one file's fingerprint.
type IndexEntry struct {
	hostfs.Stat
	SHA256    string // of the content written, hex; a symlink's target for links
	ContentID string // the source's name for the desired content
}

// NewIndex is an empty index.
func NewIndex() *Index { return &Index{Entries: map[string]*IndexEntry{}} }

// Racy reports whether a file whose stat matches e may still have changed
// unseen: its timestamps are as new as the index itself.
func (x *Index) Racy(e *IndexEntry) bool {
	return x.ref == 0 || e.Mtime >= x.ref || e.Ctime >= x.ref
}

const indexMagic = "CSIX\x01"

// LoadIndex reads an index; a missing file is an empty index.
func LoadIndex(path string) (*Index, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return NewIndex(), nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	x, err := decodeIndex(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("index %s is corrupt (%v); delete it and run with --verify", path, err)
	}
	x.ref = fi.ModTime().UnixNano()
	return x, nil
}

func decodeIndex(r *bufio.Reader) (*Index, error) {
	magic := make([]byte, len(indexMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != indexMagic {
		return nil, errors.New("bad header")
	}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	x := &Index{Entries: make(map[string]*IndexEntry, n)}
	var buf []byte
	str := func() (string, error) {
		l, err := binary.ReadUvarint(r)
		if err != nil {
			return "", err
		}
		if l > 1<<20 {
			return "", errors.New("oversized string")
		}
		if cap(buf) < int(l) {
			buf = make([]byte, l)
		}
		buf = buf[:l]
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf), nil
	}
	for range n {
		var e IndexEntry
		p, err := str()
		if err != nil {
			return nil, err
		}
		var u [4]uint64
		for i := range u {
			if u[i], err = binary.ReadUvarint(r); err != nil {
				return nil, err
			}
		}
		var v [3]int64
		for i := range v {
			if v[i], err = binary.ReadVarint(r); err != nil {
				return nil, err
			}
		}
		e.Ino, e.Mode, e.UID, e.GID = u[0], fs.FileMode(u[1]), uint32(u[2]), uint32(u[3])
		e.Size, e.Mtime, e.Ctime = v[0], v[1], v[2]
		if e.SHA256, err = str(); err != nil {
			return nil, err
		}
		if e.ContentID, err = str(); err != nil {
			return nil, err
		}
		x.Entries[p] = &e
	}
	return x, nil
}

// Save writes the index atomically.
func (x *Index) Save(path string) error {
	paths := make([]string, 0, len(x.Entries))
	for p := range x.Entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b bytes.Buffer
	b.Grow(len(paths) * 128)
	b.WriteString(indexMagic)
	var tmp [binary.MaxVarintLen64]byte
	uv := func(v uint64) { b.Write(tmp[:binary.PutUvarint(tmp[:], v)]) }
	sv := func(v int64) { b.Write(tmp[:binary.PutVarint(tmp[:], v)]) }
	str := func(s string) { uv(uint64(len(s))); b.WriteString(s) }
	uv(uint64(len(paths)))
	for _, p := range paths {
		e := x.Entries[p]
		str(p)
		uv(e.Ino)
		uv(uint64(e.Mode))
		uv(uint64(e.UID))
		uv(uint64(e.GID))
		sv(e.Size)
		sv(e.Mtime)
		sv(e.Ctime)
		str(e.SHA256)
		str(e.ContentID)
	}
	if err := WriteFile(path, b.Bytes()); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	if fi, err := os.Stat(path); err == nil {
		x.ref = fi.ModTime().UnixNano()
	}
	return nil
}
