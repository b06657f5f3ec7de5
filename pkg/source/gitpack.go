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
	dir state.Dir // the cache: objects/pack is under it
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
	w := &packWriter{dir: dir, f: f, tmp: tmp, pw: pw, sum: newTrailerHash(), done: make(chan error, 1)}
	go func() {
		err := w.ix.index(pr, f, s.Storage, w.sum)
		pr.CloseWithError(err) // a failed parse must not leave Write blocked
		w.done <- err
	}()
	return w, nil
}

// packWriter writes the pack to a temporary file and feeds the indexer the
// same bytes; Close installs pack and index under their checksum's name.
type packWriter struct {
	dir  *hostfs.Dir // objects/pack
	f    *os.File
	tmp  string // f's name
	pw   *io.PipeWriter
	sum  *trailerHash
	n    int64
	ix   packIndexer
	done chan error
}

func (w *packWriter) Write(p []byte) (int, error) {
	if _, err := w.f.Write(p); err != nil {
		return 0, err
	}
	w.sum.Write(p)
	w.n += int64(len(p))
	return w.pw.Write(p)
}

func (w *packWriter) Close() error {
	w.pw.Close()
	err := <-w.done
	if err == nil && w.n > 0 {
		err = w.install()
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
// of whole objects), then resolves deltas in parallel from the file.
type packIndexer struct {
	objs     []packObj
	byRef    map[plumbing.Hash][]int32 // REF_DELTA objects by base
	checksum plumbing.Hash
	trailer  int64 // where the checksum is
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
// by sum) and resolves every object; base holds a thin pack's bases.
func (ix *packIndexer) index(r io.Reader, f *os.File, base *filesystem.Storage, sum *trailerHash) error {
	if err := ix.scan(r); err != nil {
		return err
	}
	// The stream has ended: every Write has summed its bytes.
	if got := sum.Sum(); got != ix.checksum {
		return malformed("pack checksum %s, its content hashes to %s", ix.checksum, got)
	}
	ext, err := ix.resolve(f, base)
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
		if typ.IsDelta() {
			data, err := readAllSized(zr, size)
			if err != nil {
				return malformed("object at %d: %v", off, err)
			}
			n = int64(len(data))
			if kept+len(data) <= keepDeltas {
				o.delta, kept = data, kept+len(data)
			}
		} else {
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
	data []byte
}

// resolve computes the CRC of every object and resolves the deltas, on
// every core: each base with children is one job. It returns the bases of
// a thin pack.
func (ix *packIndexer) resolve(f *os.File, base *filesystem.Storage) ([]extBase, error) {
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
				b, err := r.raw(f, o.off, o.end)
				if err != nil {
					return err
				}
				o.crc = crc32.ChecksumIEEE(b)
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
			data, err := r.inflate(f, o)
			if err != nil {
				return err
			}
			return ix.resolveChildren(f, r, o, data, 0)
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
			obj, err := base.EncodedObject(plumbing.AnyObject, h)
			if err != nil {
				continue
			}
			data, err := readEncoded(obj)
			if err != nil {
				return nil, err
			}
			o := &packObj{typ: obj.Type(), hash: h}
			if err := ix.resolveChildren(f, new(objReader), o, data, 0); err != nil {
				return nil, err
			}
			ext = append(ext, extBase{typ: o.typ, hash: h, data: data})
			progress = true
		}
	}
	for i := range ix.objs {
		if o := &ix.objs[i]; !o.resolved.Load() {
			return nil, fmt.Errorf("%w: object at %d: its delta base is neither in the pack nor in the cache", packfile.ErrReferenceDeltaNotFound, o.off)
		}
	}
	return ext, nil
}

// fixThin appends the bases to the pack, and writes its new object count
// and checksum.
func (ix *packIndexer) fixThin(f *os.File, ext []extBase) error {
	off := ix.trailer
	for _, b := range ext {
		var buf bytes.Buffer
		writeObjectHeader(&buf, b.typ, int64(len(b.data)))
		zw := zlib.NewWriter(&buf)
		zw.Write(b.data)
		if err := zw.Close(); err != nil {
			return err
		}
		if _, err := f.WriteAt(buf.Bytes(), off); err != nil {
			return err
		}
		ix.objs = append(ix.objs, packObj{off: off, end: off + int64(buf.Len()), typ: b.typ, size: int64(len(b.data)), hash: b.hash, crc: crc32.ChecksumIEEE(buf.Bytes())})
		off += int64(buf.Len())
	}
	var count [4]byte
	binary.BigEndian.PutUint32(count[:], uint32(len(ix.objs)))
	if _, err := f.WriteAt(count[:], 8); err != nil {
		return err
	}
	h := sha1.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, off)); err != nil {
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

func readEncoded(obj plumbing.EncodedObject) ([]byte, error) {
	rc, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return readAllSized(rc, obj.Size())
}

// maxDeltaDepth is git's own limit on delta chains (pack-objects.h).
const maxDeltaDepth = 4095

// resolveChildren applies the deltas based on o (content data, depth deltas
// deep), depth first.
func (ix *packIndexer) resolveChildren(f *os.File, r *objReader, o *packObj, data []byte, depth int) error {
	if depth >= maxDeltaDepth && (len(o.children) > 0 || len(ix.byRef[o.hash]) > 0) {
		return malformed("object at %d: a delta chain deeper than %d", o.off, maxDeltaDepth)
	}
	kids := append(o.children[:len(o.children):len(o.children)], ix.byRef[o.hash]...)
	for _, k := range kids {
		c := &ix.objs[k]
		if !c.resolved.CompareAndSwap(false, true) {
			continue // a duplicate base: resolved through the other copy
		}
		delta := c.delta
		if delta == nil {
			var err error
			if delta, err = r.inflate(f, c); err != nil {
				return err
			}
		}
		out, err := packfile.PatchDelta(data, delta)
		if err != nil {
			return fmt.Errorf("object at %d: %w", c.off, err)
		}
		c.delta = nil
		c.typ, c.size = o.typ, int64(len(out))
		c.hash = plumbing.ComputeHash(c.typ, out)
		if err := ix.resolveChildren(f, r, c, out, depth+1); err != nil {
			return err
		}
	}
	return nil
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
