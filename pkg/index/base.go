package index

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"math/bits"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// An index's base file, format 3, is read in place rather than decoded:
// its rows are found by search and read as a walk needs them, through a
// small cache of the file's blocks, so that a command that checks a tree
// of 45,000 files keeps none of its entries on the heap, and memory stays
// flat as trees grow. (A read-only mapping was tried first: the kernel may
// map a large folio of the page cache at each fault, 2 MiB where the file
// was written in one go, and the index came to be resident whole.)
//
//	header   40 bytes: "CSIX\x03" and 3 zero bytes; the row count and the
//	         string table's size (uint64); the CRC-32C of the rows, of the
//	         strings and of the header's first 32 bytes (uint32); 4 zero
//	         bytes.
//	rows     rowSize bytes each (see putRow), sorted by path, unique.
//	         A base of format 2 is read as it is: its rows are the first
//	         rowSize2 bytes of these, and record no XXH3.
//	strings  each a uvarint length and its bytes.
//
// Numbers are little-endian. A row holds its SHA-256 as 32 bytes and names
// its path, its string (a symlink's target, or a SHA-256 that is not 64
// hex digits) and its content ID by their offsets in the string table.
const (
	baseMagic  = "CSIX\x03\x00\x00\x00"
	baseMagic2 = "CSIX\x02\x00\x00\x00"
	headerSize = 40
	rowSize    = 108
	rowSize2   = 92
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
	xxh                     [16]byte // with fXXH
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
	fXXH // xxh is the XXH3-128 of a file's content (format 3)

	fEntry = fSHA | fStr | fCidSum | fCidGit | fCidStr | fXXH
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
	copy(b[92:108], r.xxh[:])
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
	if len(b) >= rowSize {
		copy(r.xxh[:], b[92:108])
	}
	return r
}

// base is a base file, read in place: a file through a small cache of
// its blocks, or bytes in memory (decoded from an older format, or handed
// to decodeIndex). Its size never grows with the file's: reading the
// index of a large tree costs the cache, however the page cache holds the
// file. What callers get is copied. A base is not safe for concurrent use.
type base struct {
	f       *os.File // nil in memory; kept open while the base is used
	mem     []byte   // in memory: the whole base
	size    int64
	n, live int   // rows, and rows not marked dead
	rowLen  int64 // rowSize, or rowSize2 in a base of format 2
	changed int   // rows marked changed
	marked  bool  // a checkpoint or a run: rows may carry marks
	// A run's first and last paths: a look-up outside them reads nothing
	// (a first sync looks up every path past the end of every run).
	first, last string
	strOff      int64 // where the string table starts
	hint        int   // the row found last: look-ups come mostly in order
	at          int   // where the last search ended
	cache       blockCache
	scratch     [2][]byte // paths compared, without allocating
	err         error     // the first read that failed (the file changed under it); Save reports it
	// sparse is the path of every sparseStep-th row, for a search that
	// cannot gallop from the last; tried: none to be had (sparse.go).
	sparse *sparseIndex
	tried  bool
}

// newBase lays out a base from its header: in memory when f is nil.
func newBase(f *os.File, mem []byte, size int64, marked bool) (*base, error) {
	b := &base{f: f, mem: mem, size: size, marked: marked}
	var h [headerSize]byte
	if size < headerSize {
		return nil, corrupt("bad header")
	}
	if b.read(0, h[:]); b.err != nil {
		return nil, b.err
	}
	switch string(h[:len(baseMagic)]) {
	case baseMagic:
		b.rowLen = rowSize
	case baseMagic2:
		b.rowLen = rowSize2
	default:
		return nil, corrupt("bad header")
	}
	le := binary.LittleEndian
	if crc32.Checksum(h[:32], crcTable) != le.Uint32(h[32:]) || le.Uint32(h[36:]) != 0 {
		return nil, corrupt("header checksum mismatch")
	}
	n, strs := le.Uint64(h[8:]), le.Uint64(h[16:])
	rest := uint64(size - headerSize)
	if rl := uint64(b.rowLen); n > rest/rl || strs != rest-n*rl || strs > 1<<32 {
		return nil, corrupt("%d rows and %d bytes of strings claimed in %d bytes", n, strs, rest)
	}
	b.n, b.strOff = int(n), headerSize+int64(n)*b.rowLen
	return b, nil
}

// read fills dst from off. A read that fails (a file cut short under it)
// is kept in err and gives zeros: nothing read after that is trusted.
func (b *base) read(off int64, dst []byte) {
	if b.err != nil {
		clear(dst)
		return
	}
	if b.f == nil {
		copy(dst, b.mem[off:])
		return
	}
	for len(dst) > 0 {
		blk, err := b.cache.block(b.f, b.size, off/blockSize)
		if err == nil && off-(off/blockSize)*blockSize >= int64(len(blk)) {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			b.err = fmt.Errorf("read index %s: %w", b.f.Name(), err)
			clear(dst)
			return
		}
		k := copy(dst, blk[off%blockSize:])
		dst, off = dst[k:], off+int64(k)
	}
}

const (
	blockSize   = 16 << 10
	cacheBlocks = 32 // 512 KiB: a walk's rows and strings, and the top of its searches
)

// blockCache holds the blocks of a file read last, evicted by the clock.
type blockCache struct {
	num  [cacheBlocks]int64 // block number + 1 each slot holds; 0: none
	buf  [cacheBlocks][]byte
	ref  [cacheBlocks]bool
	hand int
	// slots are the slots used, cacheBlocks when 0: a run's cache is
	// smaller (runBlocks), as a first sync has a few runs at once.
	slots int
	reads int // blocks read from the file (a benchmark's measure)
	// The slots hit last and the one before: a walk reads a row, then its
	// strings, in another part of the file.
	last, prev int
}

func (c *blockCache) block(f *os.File, size, blk int64) ([]byte, error) {
	if c.num[c.last] == blk+1 {
		return c.buf[c.last], nil
	}
	if c.num[c.prev] == blk+1 {
		c.last, c.prev = c.prev, c.last
		return c.buf[c.last], nil
	}
	for i := range cmp.Or(c.slots, cacheBlocks) {
		if c.num[i] == blk+1 {
			c.ref[i], c.last, c.prev = true, i, c.last
			return c.buf[i], nil
		}
	}
	slots := cmp.Or(c.slots, cacheBlocks)
	for c.ref[c.hand] {
		c.ref[c.hand] = false
		c.hand = (c.hand + 1) % slots
	}
	i := c.hand
	c.hand = (c.hand + 1) % slots
	if c.buf[i] == nil {
		c.buf[i] = make([]byte, blockSize)
	}
	n := min(blockSize, max(size-blk*blockSize, 0))
	c.num[i] = 0
	c.reads++
	if k, err := f.ReadAt(c.buf[i][:n], blk*blockSize); k < int(n) {
		return nil, cmp.Or(err, io.ErrUnexpectedEOF)
	}
	c.num[i], c.ref[i], c.last, c.prev = blk+1, true, i, c.last
	c.buf[i] = c.buf[i][:n]
	return c.buf[i], nil
}

func (b *base) row(i int) row {
	var buf [rowSize]byte
	b.read(headerSize+int64(i)*b.rowLen, buf[:b.rowLen])
	return getRow(buf[:b.rowLen])
}

// strBytes reads the string at off in the table into dst's memory.
// parseBase checked every offset a row names.
func (b *base) strBytes(off uint32, dst []byte) []byte {
	at, l, ok := b.strHead(off)
	if !ok {
		return dst[:0] // only after a failed read
	}
	dst = slices.Grow(dst[:0], l)[:l]
	b.read(at, dst)
	return dst
}

// strHead is where the bytes of the string at off in the table start, and
// how many there are; false when no whole string starts there.
func (b *base) strHead(off uint32) (int64, int, bool) {
	table := uint64(b.size - b.strOff)
	if uint64(off) >= table {
		return 0, 0, false
	}
	at, n := b.strOff+int64(off), min(binary.MaxVarintLen64, table-uint64(off))
	h := b.view(at, int(n))
	var head [binary.MaxVarintLen64]byte
	if h == nil {
		h = head[:n]
		b.read(at, h)
	}
	l, k := binary.Uvarint(h)
	if k <= 0 || l > table-uint64(off)-uint64(k) {
		return 0, 0, false
	}
	return at + int64(k), int(l), true
}

func (b *base) str(off uint32) string {
	var buf [128]byte // most strings: read on the stack, then copied once
	return string(b.strBytes(off, buf[:0]))
}

// path reads row i's path into scratch k.
func (b *base) path(i, k int) []byte {
	var off [4]byte
	b.read(headerSize+int64(i)*b.rowLen+64, off[:])
	b.scratch[k] = b.strBytes(binary.LittleEndian.Uint32(off[:]), b.scratch[k])
	return b.scratch[k]
}

// view is the n bytes at off as they lie in the block cache (or in
// memory), without a copy; nil when they straddle two blocks or a read
// failed. A view is good until the next read.
func (b *base) view(off int64, n int) []byte {
	if b.err != nil || off < 0 || off+int64(n) > b.size {
		return nil
	}
	if b.f == nil {
		return b.mem[off : off+int64(n)]
	}
	blk := off / blockSize
	if (off+int64(n)-1)/blockSize != blk && n > 0 {
		return nil
	}
	buf, err := b.cache.block(b.f, b.size, blk)
	at := int(off - blk*blockSize)
	if err != nil || at+n > len(buf) {
		return nil
	}
	return buf[at : at+n]
}

// pathView is row i's path: a view into the cache where it lies in one
// block, else a copy in scratch 0. It is good until the next read.
func (b *base) pathView(i int) []byte {
	ob := b.view(headerSize+int64(i)*b.rowLen+64, 4)
	if ob == nil {
		return b.path(i, 0)
	}
	if v, ok := b.strView(binary.LittleEndian.Uint32(ob)); ok {
		return v
	}
	return b.path(i, 0)
}

// strView is the whole string at off in the table: a view into the cache
// where it lies in one block, else a copy in scratch 0; false when no
// whole string starts there. It is good until the next read.
func (b *base) strView(off uint32) ([]byte, bool) {
	at, l, ok := b.strHead(off)
	if !ok {
		return nil, false
	}
	if v := b.view(at, l); v != nil {
		return v, true
	}
	b.scratch[0] = slices.Grow(b.scratch[0][:0], l)[:l]
	b.read(at, b.scratch[0])
	return b.scratch[0], b.err == nil
}

// find is p's row, tried first just after the one found last.
func (b *base) find(p string) (int, bool) {
	if i := b.hint + 1; i < b.n && string(b.pathView(i)) == p {
		b.hint = i
		return i, true
	}
	i := b.search(p)
	if i < b.n && string(b.pathView(i)) == p {
		b.hint = i
		return i, true
	}
	return i, false
}

// search is the first row whose path is not below p. Searches come
// mostly in path order (a walk's directories, each listed as the walk
// meets it): one that starts past where the last ended gallops forward
// from there, a few steps, rather than halving the whole base.
func (b *base) search(p string) int {
	lo, hi := 0, b.n
	if at := b.at; at > 0 && at <= b.n && string(b.pathView(at-1)) < p {
		lo = at
		for step := 1; ; step *= 2 {
			if at+step-1 >= b.n {
				hi = b.n
				break
			}
			if string(b.pathView(at+step-1)) >= p {
				hi = at + step - 1
				break
			}
			lo = at + step
		}
	} else if s := b.sparseIndex(); s != nil {
		// Within the rows between two paths of the sparse index: the
		// search reads a block of rows and their strings, however large
		// the base.
		k := s.count(p)
		if k > 0 {
			lo = (k-1)*sparseStep + 1
		}
		hi = min(k*sparseStep, b.n)
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if string(b.pathView(m)) < p {
			lo = m + 1
		} else {
			hi = m
		}
	}
	b.at = lo
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

// entry is row r's entry, its strings read into place without the copies
// an item makes.
func (b *base) entry(r *row) *Entry {
	it := item{r: *r}
	if r.flags&fStr != 0 {
		it.str = b.str(r.str)
	}
	var cid [32]byte
	switch {
	case r.flags&fCidGit != 0:
		if raw := b.strBytes(r.cid, cid[:0]); len(raw) == 20 {
			return it.entryWith(raw)
		}
		it.cid = b.str(r.cid) // as it is, should it not be 20 bytes
	case r.flags&fCidStr != 0:
		it.cid = b.str(r.cid)
	}
	return it.entry()
}

// same reports whether row r's entry (as entry would make it) is e,
// reading its strings in place: no allocation.
func (b *base) same(r *row, e *Entry) bool {
	if uint64(r.ino) != e.Ino || r.size != e.Size || r.mtime != e.Mtime || r.ctime != e.Ctime ||
		r.mode != e.Mode || r.uid != e.UID || r.gid != e.GID {
		return false
	}
	if r.xxh3() != e.XXH3 {
		return false
	}
	link := r.mode&fs.ModeSymlink != 0
	var str []byte // the row's string, read once
	if r.flags&fStr != 0 {
		str = b.strBytes(r.str, b.scratch[1][:0])
		b.scratch[1] = str
	}
	switch {
	case link && r.flags&fStr != 0:
		if e.Target != string(str) || e.SHA256 != "" {
			return false
		}
	case r.flags&fSHA != 0:
		if e.Target != "" || !hexIs(e.SHA256, "", r.sum[:]) {
			return false
		}
	case r.flags&fStr != 0:
		if e.Target != "" || e.SHA256 != string(str) {
			return false
		}
	default:
		if e.Target != "" || e.SHA256 != "" {
			return false
		}
	}
	switch {
	case r.flags&fCidSum != 0:
		return hexIs(e.ContentID, "sha256:", r.sum[:])
	case r.flags&fCidGit != 0:
		var raw [32]byte
		return hexIs(e.ContentID, "git:", b.strBytes(r.cid, raw[:0]))
	case r.flags&fCidStr != 0:
		return e.ContentID == string(b.strBytes(r.cid, b.scratch[1][:0]))
	}
	return e.ContentID == ""
}

// hexIs reports whether s is prefix followed by raw in lowercase hex.
func hexIs(s, prefix string, raw []byte) bool {
	if len(s) != len(prefix)+2*len(raw) || s[:len(prefix)] != prefix {
		return false
	}
	s = s[len(prefix):]
	const digits = "0123456789abcdef"
	for i, c := range raw {
		if s[2*i] != digits[c>>4] || s[2*i+1] != digits[c&15] {
			return false
		}
	}
	return true
}

// parseBase checks a base whole (checksums, every offset a row names, the
// order of the paths) so that reading it later cannot fail; any fault is
// an error wrapping ErrCorrupt. Only a checkpoint may carry marks.
func parseBase(f *os.File, mem []byte, size int64, marked bool, by trust) (_ *base, err error) {
	b, err := newBase(f, mem, size, marked)
	if err != nil {
		return nil, err
	}
	id, known := checkedID(f, marked, time.Now())
	if known && !by.whole {
		c, ok := checked.get(id)
		if !ok && noted(by.note, id) {
			c, ok = checkedBase{live: b.n}, true // no row marked (note.go)
		}
		if ok {
			// This very file was checked whole before: a base is written
			// once and renamed into place, so one that changed since has
			// another identity.
			checked.put(id, c)
			b.live, b.changed = c.live, c.changed
			return b, nil
		}
	}
	defer func() {
		if known && err == nil {
			checked.put(id, checkedBase{b.live, b.changed})
			writeCheckNote(by.note, id)
		}
	}()
	var h [headerSize]byte
	b.read(0, h[:])
	le := binary.LittleEndian
	rows, strs := b.sum(headerSize, b.strOff), b.sum(b.strOff, size)
	if b.err != nil {
		return nil, b.err
	}
	if rows != le.Uint32(h[24:]) || strs != le.Uint32(h[28:]) {
		return nil, corrupt("checksum mismatch")
	}
	allowed := fEntry
	if b.rowLen == rowSize2 {
		allowed &^= fXXH
	}
	if marked {
		allowed |= fMarks
	}
	// Each row is looked at where it lies in the cache, and its path
	// where its string does: only the previous path is copied.
	var raw [rowSize]byte
	prev := b.scratch[1][:0]
	for i := range b.n {
		at := headerSize + int64(i)*b.rowLen
		v := b.view(at, int(b.rowLen))
		if v == nil {
			b.read(at, raw[:b.rowLen])
			v = raw[:b.rowLen]
		}
		flags, mode := le.Uint16(v[88:]), fs.FileMode(le.Uint32(v[76:]))
		path, str, cid := le.Uint32(v[64:]), le.Uint32(v[68:]), le.Uint32(v[72:])
		if !validFlags(flags, mode, allowed) || le.Uint16(v[90:]) != 0 {
			return nil, corrupt("entry %d: bad flags %#x", i+1, flags)
		}
		for _, s := range [...]struct {
			off  uint32
			used bool
		}{{str, flags&fStr != 0}, {cid, flags&(fCidGit|fCidStr) != 0}} {
			if !s.used {
				continue
			}
			if _, _, ok := b.strHead(s.off); !ok {
				return nil, corrupt("entry %d: string at %d runs past the end", i+1, s.off)
			}
		}
		p, ok := b.strView(path)
		if !ok {
			return nil, corrupt("entry %d: string at %d runs past the end", i+1, path)
		}
		if i > 0 && bytes.Compare(p, prev) <= 0 {
			return nil, corrupt("entry %d: path %q out of order", i+1, p)
		}
		prev = append(prev[:0], p...)
		if flags&fDead == 0 {
			b.live++
		}
		if flags&fChanged != 0 {
			b.changed++
		}
	}
	b.scratch[1] = prev
	if b.err != nil {
		return nil, b.err
	}
	return b, nil
}

// validFlags reports whether a row's flags are ones encodeEntry writes: a
// row means one entry only.
func validFlags(flags uint16, mode fs.FileMode, allowed uint16) bool {
	sha, link := flags&fSHA != 0, mode&fs.ModeSymlink != 0
	return flags&^allowed == 0 && bits.OnesCount16(flags&(fCidSum|fCidGit|fCidStr)) <= 1 &&
		!(sha && flags&fStr != 0) && !(link && flags&(fSHA|fXXH) != 0)
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// sum is the CRC-32C of the bytes from off to end, read straight from the
// file (the cache is for the walk).
func (b *base) sum(off, end int64) uint32 {
	if b.f == nil {
		return crc32.Checksum(b.mem[off:end], crcTable)
	}
	var c uint32
	buf := make([]byte, 64<<10)
	for off < end && b.err == nil {
		k := min(int64(len(buf)), end-off)
		if n, err := b.f.ReadAt(buf[:k], off); int64(n) < k {
			b.err = fmt.Errorf("read index %s: %w", b.f.Name(), cmp.Or(err, io.ErrUnexpectedEOF))
			break
		}
		c = crc32.Update(c, crcTable, buf[:k])
		off += k
	}
	return c
}

// baseWriter writes a base of a known number of rows: the rows and the
// strings stream to their places in the file, the header comes last.
type baseWriter struct {
	f           io.WriterAt
	n, k        int
	rows, strs  *bufio.Writer
	rcrc, scrc  hash.Hash32
	soff        uint64
	live        int    // rows written not marked dead
	changed     int    // rows written marked changed
	first, last string // the paths of the first and the last row written
	buf         [rowSize]byte
	tmp         [binary.MaxVarintLen64]byte
	err         error
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
	if w.k == 0 {
		w.first = it.path
	}
	w.last = it.path
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

func (w *baseWriter) put(s string) uint32 {
	off := w.soff
	k := binary.PutUvarint(w.tmp[:], uint64(len(s)))
	w.strs.Write(w.tmp[:k])
	w.strs.WriteString(s)
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

// trust is what a load may take a base to be checked by already.
type trust struct {
	note  state.File // a note beside the base (note.go); none when zero
	whole bool       // nothing: the base is checked whole (state check)
}

// A base checked whole is remembered by its file's identity, so loading
// the same index again (every observation of a tree, every save's reload)
// costs no second pass over it.
var checked = checkedBases{m: map[baseIdentity]checkedBase{}}

// baseIdentity names one file's content for good: its inode, size and
// change time move with any write.
type baseIdentity struct {
	dev, ino     uint64
	size         int64
	ctime, mtime int64
	marked       bool
}

// checkedBase is what checking a base whole counts.
type checkedBase struct{ live, changed int }

type checkedBases struct {
	mu sync.Mutex
	m  map[baseIdentity]checkedBase
}

// maxChecked bounds the bases remembered: a state dir has one index a
// tree, and a source stat cache.
const maxChecked = 256

func (c *checkedBases) get(id baseIdentity) (checkedBase, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[id]
	return v, ok
}

func (c *checkedBases) put(id baseIdentity, v checkedBase) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxChecked {
		clear(c.m)
	}
	c.m[id] = v
}

// racyMargin is how long before a check a file must have last changed
// for its identity to be trusted: file times move in coarse ticks, so a
// write in the very tick of the last one may leave them as they were (the
// racy-clean case of Git's index); a write after the check is seen.
const racyMargin = 100 * time.Millisecond

// checkedID is f's identity as of now; false for no file (a base in
// memory) and for one changed too recently to tell a later write by.
func checkedID(f *os.File, marked bool, now time.Time) (baseIdentity, bool) {
	if f == nil {
		return baseIdentity{}, false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return baseIdentity{}, false
	}
	if now.Sub(time.Unix(0, st.Ctim.Nano())) < racyMargin {
		return baseIdentity{}, false
	}
	return baseIdentity{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, ctime: st.Ctim.Nano(), mtime: st.Mtim.Nano(), marked: marked}, true
}
