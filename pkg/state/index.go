package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
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
	SHA256    string // of the content written, hex
	Target    string // a symlink's target (kept where a file keeps its SHA256)
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

// ErrCorruptIndex reports an index file that is truncated or damaged.
var ErrCorruptIndex = errors.New("index is corrupt")

// LoadIndex reads an index; a missing file is an empty index. A damaged one
// is an error wrapping ErrCorruptIndex and naming the file.
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
	// Read whole: the file's real size, never a count inside it, bounds what
	// decoding allocates.
	var buf bytes.Buffer
	buf.Grow(int(min(max(fi.Size(), 0), 64<<20)) + bytes.MinRead)
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	x, err := decodeIndex(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%s: %w; delete it and run with --verify", path, err)
	}
	x.ref = fi.ModTime().UnixNano()
	return x, nil
}

// minIndexEntry is the fewest bytes an encoded entry takes: one for each of
// its three string lengths and seven numbers.
const minIndexEntry = 10

// decodeIndex decodes an index file's bytes; any fault is an error wrapping
// ErrCorruptIndex.
func decodeIndex(data []byte) (*Index, error) {
	if !bytes.HasPrefix(data, []byte(indexMagic)) {
		return nil, fmt.Errorf("%w: bad header", ErrCorruptIndex)
	}
	d := &indexDecoder{b: data, off: len(indexMagic)}
	n := d.uvarint("entry count")
	if rest := uint64(len(data) - d.off); d.err == nil && n > rest/minIndexEntry {
		d.fail("%d entries claimed in %d bytes", n, rest)
	}
	if d.err != nil {
		return nil, d.err
	}
	// Sized by the bytes that remain, and no more than a modest start: the
	// map grows if a large index is real.
	x := &Index{Entries: make(map[string]*IndexEntry, min(n, 1<<16))}
	prev := ""
	for i := range n {
		d.entry = i + 1
		p := d.str("path")
		// Save writes paths sorted and unique; anything else is damage.
		if d.err == nil && i > 0 && p <= prev {
			d.fail("path %q out of order", p)
		}
		e := &IndexEntry{}
		e.Ino = d.uvarint("inode")
		e.Mode = fs.FileMode(d.uint32("mode"))
		e.UID = d.uint32("uid")
		e.GID = d.uint32("gid")
		e.Size = d.varint("size")
		e.Mtime = d.varint("mtime")
		e.Ctime = d.varint("ctime")
		if e.Mode&fs.ModeSymlink != 0 {
			e.Target = d.str("target")
		} else {
			e.SHA256 = d.str("sha256")
		}
		e.ContentID = d.str("content ID")
		if d.err != nil {
			return nil, d.err
		}
		x.Entries[p] = e
		prev = p
	}
	if d.off != len(data) {
		d.entry = 0
		d.fail("%d bytes of trailing data", len(data)-d.off)
		return nil, d.err
	}
	return x, nil
}

// indexDecoder reads the index encoding from memory. After the first fault
// every read returns zero and err keeps that fault.
type indexDecoder struct {
	b     []byte
	off   int
	entry uint64 // 1-based number of the entry being read; 0 outside entries
	err   error
}

func (d *indexDecoder) fail(format string, args ...any) {
	if d.err != nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if d.entry > 0 {
		msg = fmt.Sprintf("entry %d: %s", d.entry, msg)
	}
	d.err = fmt.Errorf("%w: %s", ErrCorruptIndex, msg)
}

func (d *indexDecoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.short(what, n)
		return 0
	}
	d.off += n
	return v
}

func (d *indexDecoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.short(what, n)
		return 0
	}
	d.off += n
	return v
}

func (d *indexDecoder) short(what string, n int) {
	if n == 0 {
		d.fail("truncated in %s at byte %d", what, d.off)
	} else {
		d.fail("%s overflows at byte %d", what, d.off)
	}
}

func (d *indexDecoder) uint32(what string) uint32 {
	v := d.uvarint(what)
	if v > math.MaxUint32 {
		d.fail("%s %d out of range", what, v)
		return 0
	}
	return uint32(v)
}

func (d *indexDecoder) str(what string) string {
	l := d.uvarint(what)
	if d.err != nil {
		return ""
	}
	if l > uint64(len(d.b)-d.off) {
		d.fail("%s of %d bytes at byte %d runs past the end", what, l, d.off)
		return ""
	}
	s := string(d.b[d.off : d.off+int(l)])
	d.off += int(l)
	return s
}

// Save writes the index atomically.
func (x *Index) Save(path string) error {
	if err := WriteFile(path, x.encode()); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	if fi, err := os.Stat(path); err == nil {
		x.ref = fi.ModTime().UnixNano()
	}
	return nil
}

// encode is the file format: the magic, the entry count, then each entry in
// path order as its path, inode, mode, uid, gid (uvarints), size, mtime,
// ctime (varints), SHA-256 and content ID; strings are a uvarint length and
// the bytes.
func (x *Index) encode() []byte {
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
		if e.Mode&fs.ModeSymlink != 0 {
			str(e.Target)
		} else {
			str(e.SHA256)
		}
		str(e.ContentID)
	}
	return b.Bytes()
}
