package state

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// An index's base file, format 2, is read in place through a read-only
// mapping rather than decoded: a command that checks a tree of 45,000
// files keeps none of its entries on the heap, and gives the mapped pages
// back as it goes, so memory stays flat as trees grow.
//
//	header   40 bytes: "CSIX\x02" and 3 zero bytes; the row count and the
//	         string table's size (uint64); the CRC-32C of the rows, of the
//	         strings and of the header's first 32 bytes (uint32); 4 zero
//	         bytes.
//	rows     rowSize bytes each (see putRow), sorted by path, unique.
//	strings  each a uvarint length and its bytes.
//
// Numbers are little-endian. A row holds its SHA-256 as 32 bytes and names
// its path, its string (a symlink's target, or a SHA-256 that is not 64
// hex digits) and its content ID by their offsets in the string table.
const (
	baseMagic  = "CSIX\x02\x00\x00\x00"
	headerSize = 40
	rowSize    = 92
)

// row is one entry as a base holds it. Its strings are offsets: into the
// string table of the base it was read from, or unset while it is written.
type row struct {
	ino, size, mtime, ctime int64
	sum                     [32]byte
	path, str, cid          uint32
	mode                    fs.FileMode
	uid, gid                uint32
	flags                   uint16
}

const (
	fSHA    uint16 = 1 << iota // SHA256 is hex(sum)
	fStr                       // str holds Target (symlinks) or a SHA256 that is not 64 hex digits
	fCidSum                    // ContentID is "sha256:" + hex(sum)
	fCidGit                    // cid holds the 20 bytes of "git:" + hex
	fCidStr                    // cid holds ContentID as is
	// Marks, only in a checkpoint (see Index.checkpoint): what the next
	// save is to write, and the entries deleted since the load.
	fChanged
	fDead

	fEntry = fSHA | fStr | fCidSum | fCidGit | fCidStr
	fMarks = fChanged | fDead
)

func putRow(b []byte, r *row) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], uint64(r.ino))
	le.PutUint64(b[8:], uint64(r.size))
	le.PutUint64(b[16:], uint64(r.mtime))
	le.PutUint64(b[24:], uint64(r.ctime))
	copy(b[32:64], r.sum[:])
	le.PutUint32(b[64:], r.path)
	le.PutUint32(b[68:], r.str)
	le.PutUint32(b[72:], r.cid)
	le.PutUint32(b[76:], uint32(r.mode))
	le.PutUint32(b[80:], r.uid)
	le.PutUint32(b[84:], r.gid)
	le.PutUint16(b[88:], r.flags)
	le.PutUint16(b[90:], 0)
}

func getRow(b []byte) (r row) {
	le := binary.LittleEndian
	r.ino, r.size = int64(le.Uint64(b[0:])), int64(le.Uint64(b[8:]))
	r.mtime, r.ctime = int64(le.Uint64(b[16:])), int64(le.Uint64(b[24:]))
	copy(r.sum[:], b[32:64])
	r.path, r.str, r.cid = le.Uint32(b[64:]), le.Uint32(b[68:]), le.Uint32(b[72:])
	r.mode = fs.FileMode(le.Uint32(b[76:]))
	r.uid, r.gid = le.Uint32(b[80:]), le.Uint32(b[84:])
	r.flags = le.Uint16(b[88:])
	return r
}

// base is a base file's bytes, mapped or (decoded from an older format,
// or handed to decodeIndex) on the heap. Nothing taken from it outlives
// the call that reads it: what callers get is copied.
type base struct {
	data       []byte
	rows, strs []byte
	n, live    int  // rows, and rows not marked dead
	changed    int  // rows marked changed
	marked     bool // a checkpoint: rows may carry marks
	mapped     bool
	touched    int // bytes read through the mapping since the last release
	hint       int // the row found last: look-ups come mostly in order
}

// releaseEvery is how many bytes are read through a mapping before its
// pages are given back: a walk over a large index keeps about this much of
// it resident, however large it is.
const releaseEvery = 1 << 20

// touch counts n bytes read; past releaseEvery the mapping's pages leave
// this process (the page cache keeps them, and a later read maps them
// again).
func (b *base) touch(n int) {
	if b.touched += n; b.touched >= releaseEvery && b.mapped {
		b.touched = 0
		unix.Madvise(b.data, unix.MADV_DONTNEED)
	}
}

func (b *base) row(i int) row {
	b.touch(rowSize)
	return getRow(b.rows[i*rowSize:])
}

// str is the string at off in the table; parseBase checked every offset a
// row names.
func (b *base) str(off uint32) []byte {
	s := b.strs[off:]
	l, k := binary.Uvarint(s)
	b.touch(k + int(l))
	return s[k : k+int(l)]
}

func (b *base) path(i int) []byte {
	return b.str(binary.LittleEndian.Uint32(b.rows[i*rowSize+64:]))
}

// find is p's row, tried first just after the one found last.
func (b *base) find(p string) (int, bool) {
	if i := b.hint + 1; i < b.n && string(b.path(i)) == p {
		b.hint = i
		return i, true
	}
	i := b.search(p)
	if i < b.n && string(b.path(i)) == p {
		b.hint = i
		return i, true
	}
	return i, false
}

// search is the first row whose path is not below p.
func (b *base) search(p string) int {
	lo, hi := 0, b.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if string(b.path(m)) < p {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// item is row i with its strings.
func (b *base) item(i int) item {
	r := b.row(i)
	it := item{path: b.str(r.path), r: r}
	if r.flags&fStr != 0 {
		it.str = b.str(r.str)
	}
	if r.flags&(fCidGit|fCidStr) != 0 {
		it.cid = b.str(r.cid)
	}
	return it
}

// parseBase checks a base's bytes whole (checksums, every offset a row
// names, the order of the paths) so that reading it later cannot fail;
// any fault is an error wrapping ErrCorruptIndex. Only a checkpoint may
// carry marks.
func parseBase(data []byte, mapped, marked bool) (*base, error) {
	b, err := layoutBase(data, mapped, marked)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	if !b.sum(b.rows, le.Uint32(data[24:])) || !b.sum(b.strs, le.Uint32(data[28:])) {
		return nil, corrupt("checksum mismatch")
	}
	allowed := fEntry
	if marked {
		allowed |= fMarks
	}
	var prev []byte
	for i := range b.n {
		raw := b.rows[i*rowSize:]
		r := getRow(raw)
		if !validFlags(r, allowed) || le.Uint16(raw[90:]) != 0 {
			return nil, corrupt("entry %d: bad flags %#x", i+1, r.flags)
		}
		for _, s := range []struct {
			off  uint32
			used bool
		}{{r.path, true}, {r.str, r.flags&fStr != 0}, {r.cid, r.flags&(fCidGit|fCidStr) != 0}} {
			if s.used && !validString(b.strs, s.off) {
				return nil, corrupt("entry %d: string at %d runs past the end", i+1, s.off)
			}
		}
		p := b.path(i)
		if i > 0 && bytes.Compare(p, prev) <= 0 {
			return nil, corrupt("entry %d: path %q out of order", i+1, p)
		}
		prev = p
		if r.flags&fDead == 0 {
			b.live++
		}
		if r.flags&fChanged != 0 {
			b.changed++
		}
		b.touch(rowSize)
	}
	return b, nil
}

// validFlags reports whether a row's flags are ones encodeEntry writes: a
// row means one entry only.
func validFlags(r row, allowed uint16) bool {
	ids := 0
	for _, f := range []uint16{fCidSum, fCidGit, fCidStr} {
		if r.flags&f != 0 {
			ids++
		}
	}
	sha := r.flags&fSHA != 0
	return r.flags&^allowed == 0 && ids <= 1 && !(sha && r.flags&fStr != 0) && !(sha && r.mode&fs.ModeSymlink != 0)
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorruptIndex, fmt.Sprintf(format, args...))
}

// layoutBase checks a base's header and finds its parts.
func layoutBase(data []byte, mapped, marked bool) (*base, error) {
	if len(data) < headerSize || string(data[:len(baseMagic)]) != baseMagic {
		return nil, corrupt("bad header")
	}
	le := binary.LittleEndian
	if crc32.Checksum(data[:32], crcTable) != le.Uint32(data[32:]) || le.Uint32(data[36:]) != 0 {
		return nil, corrupt("header checksum mismatch")
	}
	n, size := le.Uint64(data[8:]), le.Uint64(data[16:])
	rest := uint64(len(data) - headerSize)
	if n > rest/rowSize || size != rest-n*rowSize || size > 1<<32 {
		return nil, corrupt("%d rows and %d bytes of strings claimed in %d bytes", n, size, rest)
	}
	b := &base{data: data, n: int(n), marked: marked, mapped: mapped}
	b.rows = data[headerSize : headerSize+n*rowSize]
	b.strs = data[headerSize+n*rowSize:]
	return b, nil
}

// sum checks part's CRC-32C, giving its pages back as it goes.
func (b *base) sum(part []byte, want uint32) bool {
	var c uint32
	for len(part) > 0 {
		k := min(len(part), releaseEvery)
		c = crc32.Update(c, crcTable, part[:k])
		b.touch(k)
		part = part[k:]
	}
	return c == want
}

func validString(strs []byte, off uint32) bool {
	if uint64(off) >= uint64(len(strs)) {
		return false
	}
	l, k := binary.Uvarint(strs[off:])
	return k > 0 && l <= uint64(len(strs))-uint64(off)-uint64(k)
}

// mapBase maps a base file read-only; nil data for an empty file. The
// mapping is unmapped once b is unreachable: nothing handed out points
// into it.
func mapBase(f *os.File, size int64) ([]byte, func(), error) {
	if size == 0 {
		return nil, func() {}, nil
	}
	if size >= 1<<40 {
		return nil, nil, fmt.Errorf("%d bytes is too large for an index", size)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, func() { unix.Munmap(data) }, nil
}

// own unmaps b's mapping once b is unreachable.
func (b *base) own(unmap func()) *base {
	runtime.AddCleanup(b, func(f func()) { f() }, unmap)
	return b
}

// baseWriter writes a base of a known number of rows: the rows and the
// strings stream to their places in the file, the header comes last.
type baseWriter struct {
	f          io.WriterAt
	n, k       int
	rows, strs *bufio.Writer
	rcrc, scrc hash.Hash32
	soff       uint64
	live       int // rows written not marked dead
	changed    int // rows written marked changed
	buf        [rowSize]byte
	tmp        [binary.MaxVarintLen64]byte
	err        error
}

func newBaseWriter(f io.WriterAt, n int) *baseWriter {
	w := &baseWriter{f: f, n: n, rcrc: crc32.New(crcTable), scrc: crc32.New(crcTable)}
	w.rows = bufio.NewWriterSize(io.MultiWriter(io.NewOffsetWriter(f, headerSize), w.rcrc), 64<<10)
	w.strs = bufio.NewWriterSize(io.MultiWriter(io.NewOffsetWriter(f, headerSize+int64(n)*rowSize), w.scrc), 64<<10)
	return w
}

// add writes an entry; the merge hands them in path order.
func (w *baseWriter) add(it *item) {
	if w.err != nil {
		return
	}
	if w.k == w.n {
		w.err = errors.New("more index entries than counted")
		return
	}
	r := it.r
	r.path = w.put(it.path)
	if r.flags&fStr != 0 {
		r.str = w.put(it.str)
	}
	if r.flags&(fCidGit|fCidStr) != 0 {
		r.cid = w.put(it.cid)
	}
	if w.soff >= 1<<32 {
		w.err = errors.New("index strings exceed 4 GiB")
		return
	}
	putRow(w.buf[:], &r)
	w.rows.Write(w.buf[:])
	w.k++
	if r.flags&fDead == 0 {
		w.live++
	}
	if r.flags&fChanged != 0 {
		w.changed++
	}
}

// size is the base's size in bytes, once finished.
func (w *baseWriter) size() int64 { return headerSize + int64(w.n)*rowSize + int64(w.soff) }

func (w *baseWriter) put(s []byte) uint32 {
	off := w.soff
	k := binary.PutUvarint(w.tmp[:], uint64(len(s)))
	w.strs.Write(w.tmp[:k])
	w.strs.Write(s)
	w.soff += uint64(k + len(s))
	return uint32(off)
}

// finish writes what is buffered and the header.
func (w *baseWriter) finish() error {
	if w.err == nil && w.k != w.n {
		w.err = fmt.Errorf("%d index entries written of %d counted", w.k, w.n)
	}
	if w.err != nil {
		return w.err
	}
	if err := errors.Join(w.rows.Flush(), w.strs.Flush()); err != nil {
		return err
	}
	var h [headerSize]byte
	le := binary.LittleEndian
	copy(h[:], baseMagic)
	le.PutUint64(h[8:], uint64(w.n))
	le.PutUint64(h[16:], w.soff)
	le.PutUint32(h[24:], w.rcrc.Sum32())
	le.PutUint32(h[28:], w.scrc.Sum32())
	le.PutUint32(h[32:], crc32.Checksum(h[:32], crcTable))
	_, err := w.f.WriteAt(h[:], 0)
	return err
}

// memFile is a file in memory, for a base that has nowhere to go on disk.
type memFile struct{ b []byte }

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(m.b) {
		m.b = append(m.b, make([]byte, end-len(m.b))...)
	}
	return copy(m.b[off:], p), nil
}

// namedThenRemoved is a temp file in dir whose name is removed at once; a
// name left by a kill in between is swept with the state dir's other
// temp files.
func namedThenRemoved(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, tempPrefix+"spill.*")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
