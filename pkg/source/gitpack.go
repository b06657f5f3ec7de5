package source

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/klauspost/compress/zlib"
	"golang.org/x/sync/errgroup"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// packStore is the cache's storage with go-git's pack writer replaced.
// go-git's packfile.Parser inflates every object twice on one core (once to
// find where it ends, once more to resolve deltas, bases without children
// included); indexPack inflates each object once while the pack arrives and
// resolves deltas on every core, re-reading only the bases deltas need.
// Objects are still read through go-git: only the .idx is built here.
type packStore struct {
	*filesystem.Storage
	dir   state.Dir // the cache: objects/pack is under it
	packs *packSet  // its packs before the fetch, where a thin pack's bases are; may be nil
	// failed takes the error that stopped the pack from being written (a
	// full disk), at once; may be nil.
	failed chan error
	// installed is the cache's packs opened again once a pack was
	// installed (stale): what go-git reads after the fetch (its wants) is
	// there. close releases them.
	mu        sync.Mutex
	stale     bool
	installed *packSet
}

// objects is what go-git's fetch reads objects through: the packs, read
// in place, never go-git's own pack index.
func (s *packStore) objects() *packStorer {
	return &packStorer{EncodedObjectStorer: s.Storage, current: s.readPacks}
}

// readPacks is the packs reads go to: those installed by the fetch, else
// those before it.
func (s *packStore) readPacks() *packSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stale {
		if packs, err := openPacks(s.dir); err == nil {
			s.installed.release()
			s.installed, s.stale = packs, false
		}
	}
	switch {
	case s.installed != nil:
		return s.installed
	case s.packs != nil:
		return s.packs
	}
	return &packSet{dir: s.dir}
}

func (s *packStore) EncodedObject(typ plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	return s.objects().EncodedObject(typ, h)
}

func (s *packStore) HasEncodedObject(h plumbing.Hash) error {
	return s.objects().HasEncodedObject(h)
}

func (s *packStore) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	return s.objects().EncodedObjectSize(h)
}

// installedPack says a pack was installed: reads open the packs again.
func (s *packStore) installedPack() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stale = true
}

// adopt makes packs, opened after a fetch, where the next fetch's thin
// pack finds its bases and what reads go through.
func (s *packStore) adopt(packs *packSet) {
	s.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.packs = packs
}

// close releases the packs opened after an install.
func (s *packStore) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.installed.release()
	s.installed, s.stale = nil, false
}

// PackfileWriter implements storer.PackfileWriter: go-git's fetch copies the
// received pack into it.
func (s *packStore) PackfileWriter() (io.WriteCloser, error) {
	dir, err := s.dir.Sub(packDir).Open(true)
	if err != nil {
		return nil, err
	}
	f, tmp, err := dir.CreateTemp("pack")
	if err != nil {
		dir.Close()
		return nil, err
	}
	pr, pw := io.Pipe()
	w := &packWriter{store: s, dir: dir, f: f, tmp: tmp, pw: pw, sum: newTrailerHash(), done: make(chan error, 1), failed: s.failed}
	w.ix.dir, w.ix.old, w.ix.scratch = s.dir, s.packs, s.dir.Scratch
	go func() {
		err := w.ix.index(pr, f, w.sum)
		pr.CloseWithError(err) // a failed parse must not leave Write blocked
		w.done <- err
	}()
	return w, nil
}

// packWriter writes the pack to a temporary file and feeds the indexer the
// same bytes; Close installs pack and index under their checksum's name.
type packWriter struct {
	store *packStore
	dir   *hostfs.Dir // objects/pack
	f     *os.File
	tmp   string // f's name
	pw    *io.PipeWriter
	sum   *trailerHash
	n     int64
	ix    packIndexer
	done  chan error
	// err stopped the writing; what comes after it is read and dropped,
	// so that go-git's fetch runs to its end instead of waiting on a server
	// that cannot finish sending. failed is told of it at once.
	err    error
	failed chan error
}

func (w *packWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return len(p), nil
	}
	if _, err := w.f.Write(p); err != nil {
		// The temp file goes now: a fetch given up on at once may end the
		// process before Close.
		w.err = err
		w.dir.Remove(w.tmp)
		w.pw.CloseWithError(err)
		select {
		case w.failed <- err:
		default:
		}
		return len(p), nil
	}
	w.sum.Write(p)
	w.n += int64(len(p))
	return w.pw.Write(p)
}

func (w *packWriter) Close() error {
	w.pw.Close()
	err := <-w.done
	if w.err != nil {
		err = w.err
	}
	if err == nil && w.n > 0 {
		err = w.install()
		if err == nil {
			w.store.installedPack()
		}
	}
	if errors.Is(err, errEmptyPack) {
		err = nil // go-git reports an empty pack itself
	}
	w.f.Close()
	w.dir.Remove(w.tmp) // gone already when installed
	w.dir.Close()
	return err
}

func (w *packWriter) install() error {
	iw := new(idxfile.Writer)
	iw.OnHeader(uint32(len(w.ix.objs)))
	for i := range w.ix.objs {
		o := &w.ix.objs[i]
		iw.Add(o.hash, uint64(o.off), o.crc)
	}
	if err := iw.OnFooter(w.ix.checksum); err != nil {
		return err
	}
	idx, err := iw.Index()
	if err != nil {
		return err
	}
	name := "pack-" + w.ix.checksum.String()
	tmp, tmpName, err := w.dir.CreateTemp(name + ".idx")
	if err != nil {
		return err
	}
	defer w.dir.Remove(tmpName)
	bw := bufio.NewWriter(tmp)
	if _, err := idxfile.NewEncoder(bw).Encode(idx); err != nil {
		tmp.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// The index first: go-git lists packs by their .pack file, and a pack
	// without its index would break every read of the cache.
	if err := w.dir.Rename(tmpName, name+".idx"); err != nil {
		return err
	}
	return w.dir.Rename(w.tmp, name+".pack")
}

// trailerHash is the SHA-1 of a stream less its last 20 bytes: a pack's
// checksum covers everything before the checksum.
type trailerHash struct {
	h    hash.Hash
	tail []byte
}

func newTrailerHash() *trailerHash {
	return &trailerHash{h: sha1.New(), tail: make([]byte, 0, 2*sha1.Size)}
}

func (t *trailerHash) Write(p []byte) {
	if len(p) >= sha1.Size {
		t.h.Write(t.tail)
		t.h.Write(p[:len(p)-sha1.Size])
		t.tail = append(t.tail[:0], p[len(p)-sha1.Size:]...)
		return
	}
	t.tail = append(t.tail, p...)
	if extra := len(t.tail) - sha1.Size; extra > 0 {
		t.h.Write(t.tail[:extra])
		t.tail = append(t.tail[:0], t.tail[extra:]...)
	}
}

func (t *trailerHash) Sum() plumbing.Hash {
	var h plumbing.Hash
	copy(h[:], t.h.Sum(nil))
	return h
}

var errEmptyPack = errors.New("empty pack")

// keepDeltas bounds the inflated delta data kept from the first pass; past
// it, deltas are inflated again from the file when resolved.
const keepDeltas = 32 << 20

// packObj is one object of the pack.
type packObj struct {
	off, dataOff, end int64 // header, zlib data, next object
	typ               plumbing.ObjectType
	size              int64
	hash              plumbing.Hash // of deltas: known once resolved
	ref               plumbing.Hash // a REF_DELTA's base
	crc               uint32
	children          []int32 // OFS_DELTA objects based on this one
	delta             []byte  // kept delta data, or nil
	resolved          atomic.Bool
}

// packIndexer reads a pack once as it arrives (headers, boundaries, hashes
// of whole objects), then resolves deltas in parallel from the file. No
// object is held whole past streamAbove bytes: a large one is hashed as it
// streams, and a large delta base is kept in a scratch file.
type packIndexer struct {
	objs     []packObj
	byRef    map[plumbing.Hash][]int32 // REF_DELTA objects by base
	checksum plumbing.Hash
	trailer  int64 // where the checksum is

	// Where a thin pack's bases are: the cache's packs, else its loose
	// objects.
	old     *packSet
	dir     state.Dir
	scratch func() (*os.File, error)
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{packfile.ErrMalformedPackFile}, a...)...)
}

// index reads the pack from r (the same bytes are written to f, and summed
// by sum) and resolves every object.
func (ix *packIndexer) index(r io.Reader, f *os.File, sum *trailerHash) error {
	if err := ix.scan(r); err != nil {
		return err
	}
	// The stream has ended: every Write has summed its bytes.
	if got := sum.Sum(); got != ix.checksum {
		return malformed("pack checksum %s, its content hashes to %s", ix.checksum, got)
	}
	ext, err := ix.resolve(f)
	defer func() {
		for _, b := range ext {
			b.c.Close()
		}
	}()
	if err != nil || len(ext) == 0 {
		return err
	}
	return ix.fixThin(f, ext)
}

func (ix *packIndexer) scan(r io.Reader) error {
	cr := &countReader{r: r}
	br := bufio.NewReaderSize(cr, 64<<10)
	pos := func() int64 { return cr.n - int64(br.Buffered()) }
	var hdr [12]byte
	if n, err := io.ReadFull(br, hdr[:]); err != nil {
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
	ix.objs = make([]packObj, 0, min(count, 1<<20))
	ix.byRef = map[plumbing.Hash][]int32{}
	byOff := make(map[int64]int32, min(count, 1<<20))
	var zr io.ReadCloser
	buf := make([]byte, 32<<10)
	kept := 0
	for i := range count {
		off := pos()
		typ, size, err := readObjectHeader(br)
		if err != nil {
			return err
		}
		ix.objs = append(ix.objs, packObj{off: off, typ: typ, size: size})
		o := &ix.objs[i]
		switch typ {
		case plumbing.OFSDeltaObject:
			rel, err := readDeltaOffset(br)
			if err != nil {
				return err
			}
			parent, ok := byOff[off-rel]
			if !ok || rel <= 0 {
				return malformed("object at %d: no object at delta base offset %d", off, off-rel)
			}
			ix.objs[parent].children = append(ix.objs[parent].children, int32(i))
		case plumbing.REFDeltaObject:
			if _, err := io.ReadFull(br, o.ref[:]); err != nil {
				return malformed("object at %d: %v", off, err)
			}
			ix.byRef[o.ref] = append(ix.byRef[o.ref], int32(i))
		case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
		default:
			return malformed("object at %d: type %d", off, typ)
		}
		byOff[off] = int32(i)
		o.dataOff = pos()
		if zr == nil {
			zr, err = zlib.NewReader(br)
		} else {
			err = zr.(zlib.Resetter).Reset(br, nil)
		}
		if err != nil {
			return malformed("object at %d: %v", off, err)
		}
		var n int64
		switch {
		case typ.IsDelta() && size <= streamAbove && kept+int(size) <= keepDeltas:
			data, err := readAllSized(zr, size)
			if err != nil {
				return malformed("object at %d: %v", off, err)
			}
			n = int64(len(data))
			o.delta, kept = data, kept+len(data)
		case typ.IsDelta():
			// Inflated again from the file when resolved.
			if n, err = io.CopyBuffer(io.Discard, zr, buf); err != nil {
				return malformed("object at %d: %v", off, err)
			}
		default:
			h := plumbing.NewHasher(typ, size)
			if n, err = io.CopyBuffer(h, zr, buf); err != nil {
				return malformed("object at %d: %v", off, err)
			}
			o.hash = h.Sum()
			o.resolved.Store(true)
		}
		if n != size {
			return malformed("object at %d: %d bytes, its header says %d", off, n, size)
		}
		o.end = pos()
	}
	ix.trailer = pos()
	if _, err := io.ReadFull(br, ix.checksum[:]); err != nil {
		return malformed("trailer: %v", err)
	}
	if n, _ := io.Copy(io.Discard, br); n > 0 {
		return malformed("%d bytes after the trailer", n)
	}
	return nil
}

func readObjectHeader(br io.ByteReader) (plumbing.ObjectType, int64, error) {
	c, err := br.ReadByte()
	if err != nil {
		return 0, 0, malformed("object header: %v", err)
	}
	typ := plumbing.ObjectType((c >> 4) & 7)
	size := int64(c & 0x0f)
	for shift := 4; c&0x80 != 0; shift += 7 {
		if shift > 56 {
			return 0, 0, malformed("object size overflows")
		}
		if c, err = br.ReadByte(); err != nil {
			return 0, 0, malformed("object header: %v", err)
		}
		size |= int64(c&0x7f) << shift
	}
	return typ, size, nil
}

func readDeltaOffset(br io.ByteReader) (int64, error) {
	c, err := br.ReadByte()
	if err != nil {
		return 0, malformed("delta offset: %v", err)
	}
	n := int64(c & 0x7f)
	for c&0x80 != 0 {
		if n > 1<<55 {
			return 0, malformed("delta offset overflows")
		}
		if c, err = br.ReadByte(); err != nil {
			return 0, malformed("delta offset: %v", err)
		}
		n = (n+1)<<7 | int64(c&0x7f)
	}
	return n, nil
}

// readAllSized reads r to its end into a buffer sized from the header (a
// malformed size cannot allocate more than the data holds).
func readAllSized(r io.Reader, size int64) ([]byte, error) {
	b := bytes.NewBuffer(make([]byte, 0, min(size, 1<<26)+bytes.MinRead))
	_, err := b.ReadFrom(r)
	return b.Bytes(), err
}

// extBase is an object a thin pack's deltas are based on, read from the
// cache.
type extBase struct {
	typ  plumbing.ObjectType
	hash plumbing.Hash
	c    content
}

// crcOf is the CRC of [from, to) of f.
func (r *objReader) crcOf(f *os.File, from, to int64) (uint32, error) {
	if to-from <= streamAbove {
		b, err := r.raw(f, from, to)
		return crc32.ChecksumIEEE(b), err
	}
	h := crc32.NewIEEE()
	_, err := copyBuffered(h, io.NewSectionReader(f, from, to-from))
	return h.Sum32(), err
}

// resolve computes the CRC of every object and resolves the deltas, on
// every core: each base with children is one job. It returns the bases of
// a thin pack.
func (ix *packIndexer) resolve(f *os.File) ([]extBase, error) {
	workers := runtime.GOMAXPROCS(0)
	var g errgroup.Group
	g.SetLimit(workers)
	pool := sync.Pool{New: func() any { return new(objReader) }}
	const chunk = 512
	for lo := 0; lo < len(ix.objs); lo += chunk {
		hi := min(lo+chunk, len(ix.objs))
		g.Go(func() error {
			r := pool.Get().(*objReader)
			defer pool.Put(r)
			for i := lo; i < hi; i++ {
				o := &ix.objs[i]
				var err error
				if o.crc, err = r.crcOf(f, o.off, o.end); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// The roots are chosen before any job runs: resolving a delta sets its
	// type to its base's.
	var roots []*packObj
	for i := range ix.objs {
		o := &ix.objs[i]
		if !o.typ.IsDelta() && (len(o.children) > 0 || len(ix.byRef[o.hash]) > 0) {
			roots = append(roots, o)
		}
	}
	for _, o := range roots {
		g.Go(func() error {
			r := pool.Get().(*objReader)
			defer pool.Put(r)
			c, err := ix.content(f, r, o)
			if err != nil {
				return err
			}
			defer c.Close()
			return ix.resolveChildren(f, r, o, c, 0)
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// A thin pack: deltas on objects the cache already holds. Those bases
	// are appended to the pack (as git index-pack --fix-thin does): git and
	// go-git look a REF_DELTA's base up in the pack's own index.
	var ext []extBase
	for progress := true; progress; {
		progress = false
		for h, kids := range ix.byRef {
			if ix.objs[kids[0]].resolved.Load() {
				continue
			}
			b, ok, err := ix.extBase(h)
			if err != nil {
				return ext, err
			}
			if !ok {
				continue
			}
			ext = append(ext, b)
			o := &packObj{typ: b.typ, hash: h}
			if err := ix.resolveChildren(f, new(objReader), o, b.c, 0); err != nil {
				return ext, err
			}
			progress = true
		}
	}
	for i := range ix.objs {
		if o := &ix.objs[i]; !o.resolved.Load() {
			return ext, fmt.Errorf("%w: object at %d: its delta base is neither in the pack nor in the cache", packfile.ErrReferenceDeltaNotFound, o.off)
		}
	}
	return ext, nil
}

// content is a whole object of the pack (not a delta) as content.
func (ix *packIndexer) content(f *os.File, r *objReader, o *packObj) (content, error) {
	if o.size <= streamAbove {
		b, err := r.inflate(f, o)
		if err != nil {
			return nil, err
		}
		return newMem(b, false), nil
	}
	z, err := inflate(io.NewSectionReader(f, o.dataOff, o.end-o.dataOff), o.size)
	if err != nil {
		return nil, fmt.Errorf("object at %d: %w", o.off, err)
	}
	defer z.Close()
	c, err := materialise(z, o.size, ix.scratch)
	if err == nil {
		err = atEOF(z)
	}
	if err != nil {
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("object at %d: %w", o.off, err)
	}
	return c, nil
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
			return extBase{typ: typ, hash: h, c: c}, true, nil
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
	return extBase{typ: typ, hash: h, c: newMem(data, false)}, true, nil
}

// fixThin appends the bases to the pack, and writes its new object count
// and checksum. A base a pack of the cache holds whole is copied as it is
// there; any other is compressed as it streams.
func (ix *packIndexer) fixThin(f *os.File, ext []extBase) error {
	off := ix.trailer
	for _, b := range ext {
		crc := crc32.NewIEEE()
		at := io.NewOffsetWriter(f, off)
		out := io.MultiWriter(at, crc)
		var hdr bytes.Buffer
		writeObjectHeader(&hdr, b.typ, b.c.Size())
		out.Write(hdr.Bytes())
		level := zlib.DefaultCompression
		if b.c.Size() > streamAbove {
			level = zlib.BestSpeed
		}
		zw, err := zlib.NewWriterLevel(out, level)
		if err != nil {
			return err
		}
		if _, err := copyBuffered(zw, io.NewSectionReader(b.c, 0, b.c.Size())); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		n, _ := at.Seek(0, io.SeekCurrent) // what was written
		ix.objs = append(ix.objs, packObj{off: off, end: off + n, typ: b.typ, size: b.c.Size(), hash: b.hash, crc: crc.Sum32()})
		off += n
	}
	var count [4]byte
	binary.BigEndian.PutUint32(count[:], uint32(len(ix.objs)))
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
	return f.Truncate(off + sha1.Size)
}

func writeObjectHeader(w *bytes.Buffer, typ plumbing.ObjectType, size int64) {
	c := byte(typ)<<4 | byte(size&0x0f)
	for size >>= 4; size > 0; size >>= 7 {
		w.WriteByte(c | 0x80)
		c = byte(size & 0x7f)
	}
	w.WriteByte(c)
}

// maxDeltaDepth is git's own limit on delta chains (pack-objects.h).
const maxDeltaDepth = 4095

// resolveChildren applies the deltas based on o (its content base, depth
// deltas deep), depth first. A small delta on a small base is applied in
// memory; any other streams, its target hashed as it is made, and kept (in
// memory or a scratch file) only when deltas are based on it in turn.
func (ix *packIndexer) resolveChildren(f *os.File, r *objReader, o *packObj, base content, depth int) error {
	if depth >= maxDeltaDepth && (len(o.children) > 0 || len(ix.byRef[o.hash]) > 0) {
		return malformed("object at %d: a delta chain deeper than %d", o.off, maxDeltaDepth)
	}
	kids := append(o.children[:len(o.children):len(o.children)], ix.byRef[o.hash]...)
	for _, k := range kids {
		c := &ix.objs[k]
		if !c.resolved.CompareAndSwap(false, true) {
			continue // a duplicate base: resolved through the other copy
		}
		deltaSize := c.size
		c.typ = o.typ
		out, err := ix.apply(f, r, c, base, deltaSize, len(c.children) > 0)
		if err == nil && out == nil && len(ix.byRef[c.hash]) > 0 {
			// Based on by a REF_DELTA, as only its hash could tell: made again.
			out, err = ix.apply(f, r, c, base, deltaSize, true)
		}
		if err != nil {
			return fmt.Errorf("object at %d: %w", c.off, err)
		}
		c.delta = nil
		if out != nil {
			err := ix.resolveChildren(f, r, c, out, depth+1)
			out.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// apply makes c (a delta of deltaSize bytes) on base: it sets c's size and
// hash, and returns its content when keep.
func (ix *packIndexer) apply(f *os.File, r *objReader, c *packObj, base content, deltaSize int64, keep bool) (content, error) {
	var d delta
	var inMem []byte
	switch {
	case c.delta != nil:
		inMem = c.delta
	case deltaSize <= streamAbove:
		b, err := r.inflate(f, &packObj{off: c.off, dataOff: c.dataOff, end: c.end, size: deltaSize})
		if err != nil {
			return nil, err
		}
		inMem = b
	default:
		z, err := inflate(io.NewSectionReader(f, c.dataOff, c.end-c.dataOff), deltaSize)
		if err != nil {
			return nil, err
		}
		defer z.Close()
		d = bufio.NewReaderSize(z, 32<<10)
	}
	if inMem != nil {
		d = bytes.NewReader(inMem)
	}
	bsize, target, err := deltaSizes(d)
	if err == nil && bsize != base.Size() {
		err = fmt.Errorf("%w: its base holds %d bytes, the delta says %d", packfile.ErrInvalidDelta, base.Size(), bsize)
	}
	if err != nil {
		return nil, err
	}
	c.size = target
	if m, ok := base.(*memContent); ok && inMem != nil && target <= streamAbove {
		out, err := packfile.PatchDelta(m.b, inMem)
		if err != nil {
			return nil, err
		}
		c.hash = plumbing.ComputeHash(c.typ, out)
		if !keep {
			return nil, nil
		}
		return newMem(out, true), nil
	}
	dr := newDeltaReader(base, d, target)
	h := plumbing.NewHasher(c.typ, target)
	var out content
	if keep {
		out, err = materialise(io.TeeReader(dr, h), target, ix.scratch)
	} else {
		_, err = copyBuffered(h, io.LimitReader(dr, target))
	}
	if err == nil {
		err = atEOF(dr)
	}
	if err != nil {
		if out != nil {
			out.Close()
		}
		return nil, err
	}
	c.hash = h.Sum()
	return out, nil
}

// objReader reads objects back from the pack file; one per goroutine.
type objReader struct {
	buf []byte
	zr  io.ReadCloser
	br  *bufio.Reader
}

// raw returns the bytes of [from, to) of the file, valid until the next call.
func (r *objReader) raw(f *os.File, from, to int64) ([]byte, error) {
	n := int(to - from)
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	_, err := f.ReadAt(b, from)
	return b, err
}

// inflate returns o's inflated data (for a delta, the delta).
func (r *objReader) inflate(f *os.File, o *packObj) ([]byte, error) {
	sr := io.NewSectionReader(f, o.dataOff, o.end-o.dataOff)
	if r.br == nil {
		r.br = bufio.NewReaderSize(sr, 32<<10)
	} else {
		r.br.Reset(sr)
	}
	var err error
	if r.zr == nil {
		r.zr, err = zlib.NewReader(r.br)
	} else {
		err = r.zr.(zlib.Resetter).Reset(r.br, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("object at %d: %w", o.off, err)
	}
	b, err := readAllSized(r.zr, o.size)
	if err != nil {
		return nil, fmt.Errorf("object at %d: %w", o.off, err)
	}
	return b, nil
}
