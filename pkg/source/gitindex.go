package source

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/klauspost/compress/zlib"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// packIndexer indexes a pack as it arrives, in memory that does not grow
// with the pack: go-git's parser, and this indexer before, kept some 500
// bytes an object (600 MB at a million files), git's index-pack about
// 100. One pass over the stream inflates each object once, sums its CRC
// from the bytes consumed, and makes a delta at once from its base: a
// delta's base comes before it in the pack, the objects made last are
// kept (a bounded cache, by offset), and a base no longer kept is made
// again from the pack file, which holds every byte read so far. What the
// index needs of an object (ID, offset, CRC) goes to sorted runs in
// scratch files, merged into the .idx at the end.
type packIndexer struct {
	checksum plumbing.Hash
	trailer  int64 // where the checksum is
	count    int   // objects in the pack, as installed (thin bases appended)

	cur   *packFile // the pack being written, without an index yet
	reads *packSet  // delta bases: cur's objects, then the cache's packs
	recs  recordSorter
	// ext are a thin pack's bases, in the cache and not in the pack: they
	// are appended to it.
	ext map[plumbing.Hash]bool
	// deferred are deltas on a base by ID (REF_DELTA) the pack holds:
	// without an index yet, such a base is found once the rest is indexed.
	deferred []deferredObj
	// large are the last objects of more than streamAbove made, in
	// scratch files.
	large []largeObj

	// Where a thin pack's bases are: the cache's packs, else its loose
	// objects.
	old     *packSet
	dir     state.Dir
	scratch func() (*os.File, error)
}

type deferredObj struct {
	off int64
	crc uint32
}

// indexBaseCache bounds the objects kept made for the deltas after them:
// in packs git writes, nearly every delta's base is among the few
// hundred objects before it (at 100,000 files, 99% within 48, 99.9%
// within 389; 8 MiB cost 14 MB more of RSS for 5% less CPU). A variable
// for tests.
var indexBaseCache = 2 << 20

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{packfile.ErrMalformedPackFile}, a...)...)
}

// index reads the pack from r (the same bytes are written to f first, and
// summed by sum) and makes every object.
func (ix *packIndexer) index(r io.Reader, f *os.File, sum *trailerHash) error {
	ix.cur = &packFile{name: "the pack being fetched", f: f}
	ix.reads = &packSet{dir: ix.dir}
	ix.reads.bases.max = indexBaseCache
	if ix.old != nil {
		ix.reads.packs = ix.old.packs
	}
	ix.recs.scratch = ix.scratch
	ix.ext = map[plumbing.Hash]bool{}
	if err := ix.scan(r); err != nil {
		return err
	}
	// The stream has ended: every Write has summed its bytes.
	if got := sum.Sum(); got != ix.checksum {
		return malformed("pack checksum %s, its content hashes to %s", ix.checksum, got)
	}
	ix.cur.trailer = ix.trailer
	if err := ix.resolveDeferred(); err != nil {
		return err
	}
	if len(ix.ext) == 0 {
		return nil
	}
	return ix.fixThin(f)
}

// close releases the scratch files.
func (ix *packIndexer) close() {
	ix.recs.close()
	for _, l := range ix.large {
		l.c.Close()
	}
	ix.large = nil
}

// scanReader reads the pack stream for the inflater byte by byte (so
// that it takes no byte past an object's end) and sums the CRC of what
// was taken since a mark.
type scanReader struct {
	r    io.Reader
	buf  []byte
	i, n int
	pos  int64 // the stream's offset of buf[0]
	crc  uint32
	mark int // buf[mark:i] is not yet summed
}

func (s *scanReader) fill() error {
	s.crc = crc32.Update(s.crc, crc32.IEEETable, s.buf[s.mark:s.n])
	s.pos += int64(s.n)
	s.i, s.n, s.mark = 0, 0, 0
	for range 100 {
		n, err := s.r.Read(s.buf)
		s.n = n
		if n > 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

func (s *scanReader) ReadByte() (byte, error) {
	if s.i == s.n {
		if err := s.fill(); err != nil {
			return 0, err
		}
	}
	b := s.buf[s.i]
	s.i++
	return b, nil
}

func (s *scanReader) Read(p []byte) (int, error) {
	if s.i == s.n {
		if err := s.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, s.buf[s.i:s.n])
	s.i += n
	return n, nil
}

// offset is the stream's offset of the next byte.
func (s *scanReader) offset() int64 { return s.pos + int64(s.i) }

// startCRC starts summing at the next byte.
func (s *scanReader) startCRC() { s.crc, s.mark = 0, s.i }

// sumCRC is the CRC of what was read since startCRC.
func (s *scanReader) sumCRC() uint32 {
	s.crc = crc32.Update(s.crc, crc32.IEEETable, s.buf[s.mark:s.i])
	s.mark = s.i
	return s.crc
}

func (ix *packIndexer) scan(r io.Reader) error {
	sr := &scanReader{r: r, buf: make([]byte, 64<<10)}
	var hdr [12]byte
	if n, err := io.ReadFull(sr, hdr[:]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return errEmptyPack
		}
		return malformed("header: %v", err)
	}
	if string(hdr[:4]) != "PACK" {
		return malformed("no PACK signature")
	}
	if v := binary.BigEndian.Uint32(hdr[4:8]); v != 2 && v != 3 {
		return malformed("version %d", v)
	}
	count := binary.BigEndian.Uint32(hdr[8:12])
	ix.count = int(count)
	var zr io.ReadCloser
	buf := make([]byte, 32<<10)
	for range count {
		off := sr.offset()
		sr.startCRC()
		typ, size, err := readObjectHeader(sr)
		if err != nil {
			return err
		}
		var baseOff int64
		var ref plumbing.Hash
		switch typ {
		case plumbing.OFSDeltaObject:
			rel, err := readDeltaOffset(sr)
			if err != nil {
				return err
			}
			if baseOff = off - rel; rel <= 0 || baseOff < 12 {
				return malformed("object at %d: no object at delta base offset %d", off, baseOff)
			}
		case plumbing.REFDeltaObject:
			if _, err := io.ReadFull(sr, ref[:]); err != nil {
				return malformed("object at %d: %v", off, err)
			}
		case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
		default:
			return malformed("object at %d: type %d", off, typ)
		}
		if zr == nil {
			zr, err = zlib.NewReader(sr)
		} else {
			err = zr.(zlib.Resetter).Reset(sr, nil)
		}
		if err != nil {
			return malformed("object at %d: %v", off, err)
		}
		// data is the object's content (or, of a delta, the delta) when
		// small; a large one streams.
		var data []byte
		var id plumbing.Hash
		var n int64
		switch {
		case size <= streamAbove:
			data = getBuf(int(size))
			var k int
			k, err = io.ReadFull(zr, data)
			n = int64(k)
			if err == nil {
				err = atEOF(zr)
			} else if errors.Is(err, io.ErrUnexpectedEOF) {
				err = nil // reported below, as a size that differs
			}
			if err == nil && !typ.IsDelta() {
				id = plumbing.ComputeHash(typ, data)
			}
		case typ.IsDelta():
			// Made later from the file.
			n, err = io.CopyBuffer(io.Discard, zr, buf)
		default:
			h := plumbing.NewHasher(typ, size)
			n, err = io.CopyBuffer(h, zr, buf)
			id = h.Sum()
		}
		if err == nil && n != size {
			err = fmt.Errorf("%d bytes, its header says %d", n, size)
		}
		if err != nil {
			if data != nil {
				putBuf(data)
			}
			return malformed("object at %d: %v", off, err)
		}
		crc := sr.sumCRC()
		ix.cur.trailer = sr.offset() // the file holds what was read
		if !typ.IsDelta() {
			if err := ix.recs.add(id, off, crc); err != nil {
				return err
			}
			ix.keep(off, typ, data)
			continue
		}
		if err := ix.makeDelta(off, crc, typ, baseOff, ref, data); err != nil {
			return err
		}
	}
	ix.trailer = sr.offset()
	if _, err := io.ReadFull(sr, ix.checksum[:]); err != nil {
		return malformed("trailer: %v", err)
	}
	if n, _ := io.Copy(io.Discard, sr); n > 0 {
		return malformed("%d bytes after the trailer", n)
	}
	return nil
}

// keep caches an object made, for the deltas after it; b is handed over.
func (ix *packIndexer) keep(off int64, typ plumbing.ObjectType, b []byte) {
	switch {
	case b == nil:
	case ix.reads.bases.fits(b):
		ix.reads.bases.put(baseKey{ix.cur, off}, typ, b)
	default:
		putBuf(b)
	}
}

// makeDelta makes the delta at off (its data, when small, in data; else
// inflated again from the file) on its base, and records it.
func (ix *packIndexer) makeDelta(off int64, crc uint32, typ plumbing.ObjectType, baseOff int64, ref plumbing.Hash, data []byte) error {
	defer func() {
		if data != nil {
			putBuf(data)
		}
	}()
	btyp, base, err := ix.baseOf(typ, baseOff, ref)
	if errors.Is(err, packfile.ErrReferenceDeltaNotFound) {
		ix.deferred = append(ix.deferred, deferredObj{off, crc})
		return nil
	}
	if err != nil {
		return fmt.Errorf("object at %d: %w", off, err)
	}
	defer base.Close()
	var d delta
	if data != nil {
		d = bytes.NewReader(data)
	} else {
		hd, err := ix.reads.header(ix.cur, off)
		if err != nil {
			return err
		}
		z, err := inflate(io.NewSectionReader(ix.cur.f, hd.data, ix.cur.trailer-hd.data), hd.size)
		if err != nil {
			return fmt.Errorf("object at %d: %w", off, err)
		}
		defer z.Close()
		d = bufio.NewReaderSize(z, 32<<10)
	}
	bsize, target, err := deltaSizes(d)
	if err == nil && bsize != base.Size() {
		err = fmt.Errorf("%w: its base holds %d bytes, the delta says %d", packfile.ErrInvalidDelta, base.Size(), bsize)
	}
	if err != nil {
		return fmt.Errorf("object at %d: %w", off, err)
	}
	dr := newDeltaReader(base, d, target)
	if target > streamAbove {
		// Kept in a scratch file as it is hashed: the next version of a
		// large file is most likely a delta on this one.
		h := plumbing.NewHasher(btyp, target)
		c, err := materialise(io.TeeReader(dr, h), target, ix.scratch)
		if err == nil {
			err = atEOF(dr)
		}
		if err != nil {
			if c != nil {
				c.Close()
			}
			return fmt.Errorf("object at %d: %w", off, err)
		}
		ix.keepLarge(off, btyp, c)
		return ix.recs.add(h.Sum(), off, crc)
	}
	out := getBuf(int(target))
	if _, err := io.ReadFull(dr, out); err != nil {
		putBuf(out)
		return fmt.Errorf("object at %d: %w", off, err)
	}
	if err := atEOF(dr); err != nil {
		putBuf(out)
		return fmt.Errorf("object at %d: %w", off, err)
	}
	if err := ix.recs.add(plumbing.ComputeHash(btyp, out), off, crc); err != nil {
		putBuf(out)
		return err
	}
	ix.keep(off, btyp, out)
	return nil
}

// keepLarge is how many objects of more than streamAbove are kept, in
// scratch files, as delta bases.
const keepLarge = 4

// largeObj is an object of the pack kept in a scratch file.
type largeObj struct {
	off int64
	typ plumbing.ObjectType
	c   content
}

// keepLarge keeps c, the object at off, for the deltas after it; c is
// handed over.
func (ix *packIndexer) keepLarge(off int64, typ plumbing.ObjectType, c content) {
	if len(ix.large) == keepLarge {
		ix.large[0].c.Close()
		ix.large = ix.large[1:]
	}
	ix.large = append(ix.large, largeObj{off, typ, c})
}

// borrowed is content the caller must not close.
type borrowed struct{ content }

func (borrowed) Close() error { return nil }

// baseOf is a delta's base: by offset in the pack (kept, or made again
// from the file) or by ID in the cache (a thin pack's).
func (ix *packIndexer) baseOf(typ plumbing.ObjectType, baseOff int64, ref plumbing.Hash) (plumbing.ObjectType, content, error) {
	if typ != plumbing.OFSDeltaObject {
		return ix.refBase(ref)
	}
	for _, l := range ix.large {
		if l.off == baseOff {
			return l.typ, borrowed{l.c}, nil
		}
	}
	btyp, base, err := ix.reads.base(ix.cur, baseOff, 1)
	if err != nil {
		return 0, nil, err
	}
	if _, ok := base.(*fileContent); ok {
		ix.keepLarge(baseOff, btyp, base)
		return btyp, borrowed{base}, nil
	}
	return btyp, base, nil
}

// hashStream is the ID of an object of size bytes read from r, which must
// end there.
func hashStream(typ plumbing.ObjectType, size int64, r io.Reader) (plumbing.Hash, error) {
	h := plumbing.NewHasher(typ, size)
	n, err := copyBuffered(h, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("%d bytes, its header says %d", n, size)
	}
	if err == nil {
		err = atEOF(r)
	}
	return h.Sum(), err
}

// refBase is the base of a REF_DELTA while the pack streams: in the
// cache (a thin pack's), else ErrReferenceDeltaNotFound (in the pack,
// found once it is indexed, or nowhere).
func (ix *packIndexer) refBase(ref plumbing.Hash) (plumbing.ObjectType, content, error) {
	if ix.old != nil {
		p, off, err := ix.old.locate(ref)
		switch {
		case err == nil:
			typ, c, err := ix.reads.base(p, off, 1)
			if err != nil {
				return 0, nil, ix.old.damaged(ref, p, err)
			}
			ix.ext[ref] = true
			return typ, c, nil
		case !errors.Is(err, errNotPacked):
			return 0, nil, err
		}
	}
	typ, data, err := readLoose(ix.dir, ref)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return 0, nil, fmt.Errorf("%w: base %s", packfile.ErrReferenceDeltaNotFound, ref)
	}
	if err != nil {
		return 0, nil, err
	}
	ix.ext[ref] = true
	return typ, newMem(data, true), nil
}

// indexed is the pack's index of what is recorded so far, in a scratch
// file, and a packSet that reads the pack through it (and the cache's
// packs). The caller releases it.
func (ix *packIndexer) indexed() (*packFile, *packSet, error) {
	f, err := ix.scratch()
	if err != nil {
		return nil, nil, err
	}
	p := &packFile{name: ix.cur.name, f: ix.cur.f, idx: f, trailer: ix.trailer}
	if err := ix.recs.writeIndex(f, ix.checksum); err != nil {
		f.Close()
		return nil, nil, err
	}
	if err := p.readIndex(func(what string) error { return fmt.Errorf("the pack's index in progress: %s", what) }); err != nil {
		f.Close()
		return nil, nil, err
	}
	s := &packSet{dir: ix.dir, packs: []*packFile{p}}
	s.bases.max = indexBaseCache
	if ix.old != nil {
		s.packs = append(s.packs, ix.old.packs...)
	}
	return p, s, nil
}

// resolveDeferred makes the deltas on bases by ID the pack holds, in
// rounds: each reads the pack through an index of what is made so far.
func (ix *packIndexer) resolveDeferred() error {
	for len(ix.deferred) > 0 {
		p, s, err := ix.indexed()
		if err != nil {
			return err
		}
		var left []deferredObj
		for _, d := range ix.deferred {
			typ, size, rc, err := s.openAt(p, d.off, 0)
			if errors.Is(err, packfile.ErrReferenceDeltaNotFound) {
				left = append(left, d)
				continue
			}
			if err == nil {
				var id plumbing.Hash
				id, err = hashStream(typ, size, rc)
				rc.Close()
				if err == nil {
					err = ix.recs.add(id, d.off, d.crc)
				}
			}
			if err != nil {
				p.idx.Close()
				return fmt.Errorf("object at %d: %w", d.off, err)
			}
		}
		p.idx.Close()
		if len(left) == len(ix.deferred) {
			return fmt.Errorf("%w: object at %d: its delta base is neither in the pack nor in the cache", packfile.ErrReferenceDeltaNotFound, left[0].off)
		}
		ix.deferred = left
	}
	return nil
}

// fixThin appends a thin pack's bases to it (as git index-pack --fix-thin
// does: git and go-git look a REF_DELTA's base up in the pack's own
// index), compressed as they stream, and writes its new object count and
// checksum. A base the pack holds too is not appended.
func (ix *packIndexer) fixThin(f *os.File) error {
	p, _, err := ix.indexed()
	if err != nil {
		return err
	}
	var ext []plumbing.Hash
	for h := range ix.ext {
		if _, ok, err := p.lookup(h); err != nil {
			p.idx.Close()
			return err
		} else if !ok {
			ext = append(ext, h)
		}
	}
	p.idx.Close()
	slices.SortFunc(ext, func(a, b plumbing.Hash) int { return bytes.Compare(a[:], b[:]) })
	off := ix.trailer
	for _, h := range ext {
		b, ok, err := ix.extBase(h)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: base %s left the cache", packfile.ErrReferenceDeltaNotFound, h)
		}
		n, crc, err := appendObject(f, off, b)
		b.c.Close()
		if err != nil {
			return err
		}
		if err := ix.recs.add(h, off, crc); err != nil {
			return err
		}
		ix.count++
		off += n
	}
	var count [4]byte
	binary.BigEndian.PutUint32(count[:], uint32(ix.count))
	if _, err := f.WriteAt(count[:], 8); err != nil {
		return err
	}
	h := sha1.New()
	if _, err := copyBuffered(h, io.NewSectionReader(f, 0, off)); err != nil {
		return err
	}
	copy(ix.checksum[:], h.Sum(nil))
	if _, err := f.WriteAt(ix.checksum[:], off); err != nil {
		return err
	}
	ix.trailer = off
	return f.Truncate(off + sha1.Size)
}

// appendObject writes the object b at off of f, compressed; it returns
// how many bytes it took and their CRC.
func appendObject(f *os.File, off int64, b extBase) (int64, uint32, error) {
	crc := crc32.NewIEEE()
	at := io.NewOffsetWriter(f, off)
	out := io.MultiWriter(at, crc)
	var hdr bytes.Buffer
	writeObjectHeader(&hdr, b.typ, b.c.Size())
	if _, err := out.Write(hdr.Bytes()); err != nil {
		return 0, 0, err
	}
	level := zlib.DefaultCompression
	if b.c.Size() > streamAbove {
		level = zlib.BestSpeed
	}
	zw, err := zlib.NewWriterLevel(out, level)
	if err != nil {
		return 0, 0, err
	}
	if _, err := copyBuffered(zw, io.NewSectionReader(b.c, 0, b.c.Size())); err != nil {
		return 0, 0, err
	}
	if err := zw.Close(); err != nil {
		return 0, 0, err
	}
	n, _ := at.Seek(0, io.SeekCurrent)
	return n, crc.Sum32(), nil
}

// extBase is an object a thin pack's deltas are based on, read from the
// cache.
type extBase struct {
	typ plumbing.ObjectType
	c   content
}

// extBase finds the object h in the cache, for a thin pack; ok is false
// when the cache does not hold it.
func (ix *packIndexer) extBase(h plumbing.Hash) (extBase, bool, error) {
	if ix.old != nil {
		p, off, err := ix.old.locate(h)
		switch {
		case err == nil:
			typ, c, err := ix.old.base(p, off, 0)
			if err != nil {
				return extBase{}, false, ix.old.damaged(h, p, err)
			}
			return extBase{typ: typ, c: c}, true, nil
		case !errors.Is(err, errNotPacked):
			return extBase{}, false, err
		}
	}
	typ, data, err := readLoose(ix.dir, h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return extBase{}, false, nil
	}
	if err != nil {
		return extBase{}, false, fmt.Errorf("thin pack base %s: %w", h, err)
	}
	return extBase{typ: typ, c: newMem(data, true)}, true, nil
}

// record is what a pack index holds of an object.
type record struct {
	off uint64
	id  plumbing.Hash
	crc uint32
}

// recordBytes is a record's size in a run.
const recordBytes = 20 + 8 + 4

// runRecords is how many records are sorted in memory (2 MB) before they
// go to a run. A variable for tests.
var runRecords = 64 << 10

// recordSorter collects records and writes them as a pack index, sorted
// by ID: in memory up to runRecords, in sorted runs in scratch files
// beyond.
type recordSorter struct {
	scratch func() (*os.File, error)
	buf     []record
	runs    []*os.File
	n       int
	counts  [256]uint32 // by first byte
}

func (r *recordSorter) add(id plumbing.Hash, off int64, crc uint32) error {
	if r.buf == nil {
		r.buf = make([]record, 0, runRecords)
	}
	r.buf = append(r.buf, record{off: uint64(off), id: id, crc: crc})
	r.n++
	r.counts[id[0]]++
	if len(r.buf) == runRecords {
		return r.spill()
	}
	return nil
}

func byID(a, b record) int { return bytes.Compare(a.id[:], b.id[:]) }

// spill writes the records in memory to a run.
func (r *recordSorter) spill() error {
	slices.SortFunc(r.buf, byID)
	f, err := r.scratch()
	if err != nil {
		return fmt.Errorf("scratch file for the pack's index: %w", err)
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	var b [recordBytes]byte
	for _, rec := range r.buf {
		copy(b[:20], rec.id[:])
		binary.BigEndian.PutUint64(b[20:28], rec.off)
		binary.BigEndian.PutUint32(b[28:], rec.crc)
		bw.Write(b[:])
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	r.runs = append(r.runs, f)
	r.buf = r.buf[:0]
	return nil
}

func (r *recordSorter) close() {
	for _, f := range r.runs {
		f.Close()
	}
	r.runs, r.buf = nil, nil
}

// runReader reads a run back.
type runReader struct {
	br  *bufio.Reader
	rec record
	ok  bool
}

func (rr *runReader) next() error {
	var b [recordBytes]byte
	if _, err := io.ReadFull(rr.br, b[:]); err != nil {
		rr.ok = false
		if err == io.EOF {
			return nil
		}
		return err
	}
	copy(rr.rec.id[:], b[:20])
	rr.rec.off = binary.BigEndian.Uint64(b[20:28])
	rr.rec.crc = binary.BigEndian.Uint32(b[28:])
	rr.ok = true
	return nil
}

// writeIndex writes every record so far to f as a version 2 pack index
// of the pack whose checksum is sum. It may be called again.
func (r *recordSorter) writeIndex(f *os.File, sum plumbing.Hash) error {
	mem := slices.Clone(r.buf)
	slices.SortFunc(mem, byID)
	readers := make([]*runReader, len(r.runs))
	for i, run := range r.runs {
		st, err := run.Stat()
		if err != nil {
			return err
		}
		readers[i] = &runReader{br: bufio.NewReaderSize(io.NewSectionReader(run, 0, st.Size()), 16<<10)}
		if err := readers[i].next(); err != nil {
			return err
		}
	}
	n := int64(r.n)
	var head [idxHead]byte
	copy(head[:], "\xfftOc\x00\x00\x00\x02")
	var total uint32
	for i, c := range r.counts {
		total += c
		binary.BigEndian.PutUint32(head[8+4*i:], total)
	}
	if _, err := f.WriteAt(head[:], 0); err != nil {
		return err
	}
	section := func(at int64) *bufio.Writer {
		return bufio.NewWriterSize(io.NewOffsetWriter(f, at), 32<<10)
	}
	names, crcs, offs := section(idxHead), section(idxHead+20*n), section(idxHead+24*n)
	large := section(idxHead + 28*n)
	nLarge := 0
	var b [8]byte
	for {
		var least *record
		from := -1
		for i, rr := range readers {
			if rr.ok && (least == nil || byID(rr.rec, *least) < 0) {
				least, from = &rr.rec, i
			}
		}
		if len(mem) > 0 && (least == nil || byID(mem[0], *least) < 0) {
			least, from = &mem[0], -1
		}
		if least == nil {
			break
		}
		names.Write(least.id[:])
		binary.BigEndian.PutUint32(b[:4], least.crc)
		crcs.Write(b[:4])
		if least.off < 1<<31 {
			binary.BigEndian.PutUint32(b[:4], uint32(least.off))
		} else {
			binary.BigEndian.PutUint32(b[:4], uint32(nLarge)|1<<31)
			var l [8]byte
			binary.BigEndian.PutUint64(l[:], least.off)
			large.Write(l[:])
			nLarge++
		}
		offs.Write(b[:4])
		if from >= 0 {
			if err := readers[from].next(); err != nil {
				return err
			}
		} else {
			mem = mem[1:]
		}
	}
	for _, w := range []*bufio.Writer{names, crcs, offs, large} {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	end := idxHead + 28*n + 8*int64(nLarge)
	if _, err := f.WriteAt(sum[:], end); err != nil {
		return err
	}
	h := sha1.New()
	if _, err := copyBuffered(h, io.NewSectionReader(f, 0, end+20)); err != nil {
		return err
	}
	if _, err := f.WriteAt(h.Sum(nil), end+20); err != nil {
		return err
	}
	return f.Truncate(end + 40)
}
