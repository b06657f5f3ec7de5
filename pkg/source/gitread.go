package source

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/bits"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/klauspost/compress/zlib"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// packSet reads objects straight from the cache's packs, for the many
// blob reads of a sync: one open file per pack read with pread from any
// goroutine, inflaters and buffers pooled, the delta bases last used kept
// (bounded). go-git's object reader reopens and seeks the pack and copies
// each object through its cache; this reads each blob with one inflation.
// It holds the packs that were installed when it was opened; an object it
// lacks (a loose object) is read through go-git instead.
type packSet struct {
	dir   state.Dir // the cache
	packs []*packFile
	bases baseCache
	refs  atomic.Int32 // the Git that opened it and each open tree
}

// packFile is one pack and its index. The index is read in place, with
// pread, as git reads it with mmap: the heap holds its fan-out table and
// every sampleEvery-th object ID's first 8 bytes (256 KB at a million
// objects), never the IDs or offsets of every object. A lookup is a
// search of the sample, then one read of a block of IDs and one of the
// offset. The pages read stay in the page cache, not in the process.
type packFile struct {
	name   string // pack-<sum>.pack
	f      *os.File
	idx    *os.File
	info   hostfs.Stat // the pack as opened
	fanout [256]uint32
	n      int
	nLarge int      // entries of the 64-bit offset table
	sample []uint64 // the first 8 bytes of each sampleEvery-th ID
	// trailer is where the last object ends: the pack's checksum.
	trailer int64
}

// sampleEvery is how many IDs one sample stands for: one lookup reads a
// block of that many IDs (640 bytes).
const sampleEvery = 32

// idxHead is the size of a version 2 index's header and fan-out table.
const idxHead = 8 + 256*4

// packDir is where a cache keeps its packs.
const packDir = "objects/pack"

// openPacks opens every pack of the cache at dir.
func openPacks(dir state.Dir) (*packSet, error) {
	entries, err := dir.Sub(packDir).ReadDir()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	s := &packSet{dir: dir}
	s.refs.Store(1)
	s.bases.max = baseCacheBytes
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".idx")
		if !ok || !strings.HasPrefix(name, "pack-") {
			continue
		}
		p, err := openPack(dir.Sub(packDir), name)
		if err != nil {
			s.close()
			return nil, err
		}
		s.packs = append(s.packs, p)
	}
	return s, nil
}

func (s *packSet) acquire() *packSet {
	if s != nil {
		s.refs.Add(1)
	}
	return s
}

// release drops a reference; the last one closes the files.
func (s *packSet) release() {
	if s != nil && s.refs.Add(-1) == 0 {
		s.close()
	}
}

// changed reports a pack replaced, rewritten or gone since it was opened:
// the cache was changed behind the process's back.
func (s *packSet) changed() bool {
	for _, p := range s.packs {
		st, err := s.dir.Sub(packDir).Lstat(p.name)
		if err != nil || st.Ino != p.info.Ino || st.Size != p.info.Size || st.Mtime != p.info.Mtime {
			return true
		}
	}
	return false
}

func (s *packSet) close() {
	for _, p := range s.packs {
		p.close()
	}
}

func (p *packFile) close() {
	p.f.Close()
	p.idx.Close()
}

// openPack opens the version 2 pack index name.idx in dir and its pack.
func openPack(dir state.Dir, name string) (*packFile, error) {
	idxPath := dir.File(name + ".idx")
	bad := func(what string) error {
		return fmt.Errorf("pack index %s: %s", idxPath, what)
	}
	p := &packFile{name: name + ".pack"}
	var err error
	if p.idx, err = dir.OpenFile(name+".idx", os.O_RDONLY, 0); err != nil {
		return nil, err
	}
	if err := p.readIndex(bad); err != nil {
		p.idx.Close()
		return nil, err
	}
	if p.f, err = dir.OpenFile(p.name, os.O_RDONLY, 0); err != nil {
		p.idx.Close()
		return nil, err
	}
	fi, err := p.f.Stat()
	if err != nil {
		p.close()
		return nil, err
	}
	p.info = hostfs.Stat{Size: fi.Size(), Mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		p.info.Ino = uint64(st.Ino)
	}
	p.trailer = fi.Size() - 20
	if p.trailer < 12 {
		p.close()
		return nil, fmt.Errorf("pack %s: %d bytes, too short for a pack", dir.File(p.name), fi.Size())
	}
	return p, nil
}

// readIndex checks the index's header and sizes, and reads its fan-out
// table and the sample of its IDs.
func (p *packFile) readIndex(bad func(string) error) error {
	fi, err := p.idx.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	var head [idxHead]byte
	if size < idxHead+2*20 {
		return bad("not a version 2 pack index")
	}
	if _, err := p.idx.ReadAt(head[:], 0); err != nil {
		return bad(err.Error())
	}
	if string(head[:4]) != "\xfftOc" || binary.BigEndian.Uint32(head[4:8]) != 2 {
		return bad("not a version 2 pack index")
	}
	for i := range p.fanout {
		p.fanout[i] = binary.BigEndian.Uint32(head[8+4*i:])
		if i > 0 && p.fanout[i] < p.fanout[i-1] {
			return bad("its fan-out table decreases")
		}
	}
	p.n = int(p.fanout[255])
	large := idxHead + int64(p.n)*(20+4+4)
	if large+2*20 > size {
		return bad(fmt.Sprintf("%d objects do not fit in %d bytes", p.n, size))
	}
	p.nLarge = int((size - large - 2*20) / 8)
	p.sample = make([]uint64, 0, (p.n+sampleEvery-1)/sampleEvery)
	br := bufio.NewReaderSize(io.NewSectionReader(p.idx, idxHead, int64(p.n)*20), 64<<10)
	var id [20]byte
	for i := range p.n {
		if _, err := io.ReadFull(br, id[:]); err != nil {
			return bad(err.Error())
		}
		if i%sampleEvery == 0 {
			p.sample = append(p.sample, binary.BigEndian.Uint64(id[:8]))
		}
	}
	return nil
}

// find returns the position of h in the index.
func (p *packFile) find(h plumbing.Hash) (int, bool, error) {
	lo, hi := 0, int(p.fanout[h[0]])
	if h[0] > 0 {
		lo = int(p.fanout[h[0]-1])
	}
	if lo >= hi {
		return 0, false, nil
	}
	// The block of IDs h may be in: from the last sample below h to the
	// first above it.
	key := binary.BigEndian.Uint64(h[:8])
	klo, khi := lo/sampleEvery, (hi-1)/sampleEvery+1
	first := klo + sort.Search(khi-klo, func(k int) bool { return p.sample[klo+k] >= key })
	past := first + sort.Search(khi-first, func(k int) bool { return p.sample[first+k] > key })
	from, to := lo, hi
	if first > klo {
		from = max(lo, (first-1)*sampleEvery)
	}
	to = min(hi, past*sampleEvery)
	if from >= to {
		return 0, false, nil
	}
	var small [sampleEvery * 2 * 20]byte
	var ids []byte
	if n := (to - from) * 20; n <= len(small) {
		ids = small[:n]
	} else {
		ids = make([]byte, n)
	}
	if _, err := p.idx.ReadAt(ids, idxHead+int64(from)*20); err != nil {
		return 0, false, err
	}
	i, ok := sort.Find(to-from, func(i int) int { return bytes.Compare(h[:], ids[i*20:i*20+20]) })
	return from + i, ok, nil
}

// offset is where the object at position i of the index starts.
func (p *packFile) offset(i int) (int64, error) {
	var b [8]byte
	if _, err := p.idx.ReadAt(b[:4], idxHead+int64(p.n)*24+int64(i)*4); err != nil {
		return 0, err
	}
	o := int64(binary.BigEndian.Uint32(b[:4]))
	if o&(1<<31) != 0 {
		j := int(o &^ (1 << 31))
		if j >= p.nLarge {
			return 0, fmt.Errorf("pack index of %s: object %d: no large offset %d", p.name, i, j)
		}
		if _, err := p.idx.ReadAt(b[:], idxHead+int64(p.n)*28+int64(j)*8); err != nil {
			return 0, err
		}
		o = int64(binary.BigEndian.Uint64(b[:]))
	}
	if o < 12 || o >= p.trailer {
		return 0, fmt.Errorf("pack index of %s: object %d at offset %d, outside the pack's %d bytes", p.name, i, o, p.trailer+20)
	}
	return o, nil
}

// lookup finds h in p: where it starts.
func (p *packFile) lookup(h plumbing.Hash) (int64, bool, error) {
	i, ok, err := p.find(h)
	if err != nil || !ok {
		return 0, false, err
	}
	off, err := p.offset(i)
	return off, err == nil, err
}

// errNotPacked is an object none of the packs holds.
var errNotPacked = errors.New("not in a pack")

// locate finds the object h: its pack, and where it starts.
// errNotPacked says no pack holds it; another error, that an index could
// not be read.
func (s *packSet) locate(h plumbing.Hash) (*packFile, int64, error) {
	for _, p := range s.packs {
		off, ok, err := p.lookup(h)
		if err != nil {
			markRebuild(s.dir)
			return nil, 0, fmt.Errorf("git cache %s: object %s: %w (the cache is fetched again next time)", s.dir, h, err)
		}
		if ok {
			return p, off, nil
		}
	}
	return nil, 0, errNotPacked
}

// damaged wraps an error reading the object h from p, and marks the cache
// to be fetched again.
func (s *packSet) damaged(h plumbing.Hash, p *packFile, err error) error {
	markRebuild(s.dir)
	return fmt.Errorf("git cache %s: object %s in %s: %w (the cache is fetched again next time)", s.dir, h, p.name, err)
}

// open streams an object's content: its type, its size, and a reader
// that holds at most streamAbove bytes of it (a larger object is inflated
// and delta-applied as it is read). An object that cannot be read marks
// the cache to be fetched again.
func (s *packSet) open(h plumbing.Hash) (plumbing.ObjectType, int64, io.ReadCloser, error) {
	p, off, err := s.locate(h)
	if err != nil {
		return 0, 0, nil, err
	}
	typ, size, rc, err := s.openAt(p, off, 0)
	if err != nil {
		return 0, 0, nil, s.damaged(h, p, err)
	}
	if _, ok := rc.(*blobReader); ok {
		return typ, size, rc, nil // in memory: nothing more can fail
	}
	return typ, size, &checked{ReadCloser: rc, fail: func(err error) error { return s.damaged(h, p, err) }}, nil
}

// checked is a stream whose errors say which object failed.
type checked struct {
	io.ReadCloser
	fail func(error) error
}

func (c *checked) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = c.fail(err)
	}
	return n, err
}

// read returns an object's content whole: for trees and symlinks, never
// for a blob that is mirrored. The content is the caller's, to hand back
// with putBuf when done.
func (s *packSet) read(h plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	typ, size, rc, err := s.open(h)
	if err != nil {
		return 0, nil, err
	}
	if br, ok := rc.(*blobReader); ok {
		return typ, br.buf, nil
	}
	defer rc.Close()
	data := getBuf(int(size))
	if _, err := io.ReadFull(rc, data); err != nil {
		putBuf(data)
		return 0, nil, err
	}
	return typ, data, nil
}

// size is an object's size from its header, without inflating it: of a
// delta, the few bytes of the delta that say what it makes.
func (s *packSet) size(h plumbing.Hash) (int64, error) {
	p, off, err := s.locate(h)
	if err != nil {
		return 0, err
	}
	hd, err := s.header(p, off)
	if err != nil || !hd.typ.IsDelta() {
		return hd.size, err
	}
	z, err := inflate(io.NewSectionReader(p.f, hd.data, p.trailer-hd.data), hd.size)
	if err != nil {
		return 0, err
	}
	defer z.Close()
	_, target, err := deltaSizes(z)
	return target, err
}

// objHeader is what an object's header in a pack says.
type objHeader struct {
	typ  plumbing.ObjectType
	size int64 // inflated; of a delta, the delta's own
	data int64 // where its zlib data starts
	// end is where its zlib data ends at the latest: deflate's bound on
	// size bytes, or the pack's end. The index does not say where each
	// object ends, and nothing here needs to: inflating stops at the end
	// of the zlib stream.
	end int64
	// Of a delta, where its base is.
	basePack *packFile
	baseOff  int64
}

// deflated bounds the zlib stream of n bytes: zlib's own bound
// (deflateBound: stored blocks) with room to spare for any encoder.
func deflated(n int64) int64 { return n + n>>3 + 64 }

// header reads the header of the object at off of p.
func (s *packSet) header(p *packFile, off int64) (objHeader, error) {
	var buf [64]byte
	raw := buf[:min(int64(len(buf)), p.trailer-off)]
	if _, err := p.f.ReadAt(raw, off); err != nil {
		return objHeader{}, fmt.Errorf("read object at %d: %w", off, err)
	}
	r := bytes.NewReader(raw)
	typ, size, err := readObjectHeader(r)
	if err != nil {
		return objHeader{}, err
	}
	h := objHeader{typ: typ, size: size, basePack: p}
	switch typ {
	case plumbing.OFSDeltaObject:
		rel, err := readDeltaOffset(r)
		if err != nil {
			return objHeader{}, err
		}
		h.baseOff = off - rel
		if rel <= 0 || h.baseOff < 12 {
			return objHeader{}, malformed("object at %d: no object at delta base offset %d", off, h.baseOff)
		}
	case plumbing.REFDeltaObject:
		var ref plumbing.Hash
		if _, err := io.ReadFull(r, ref[:]); err != nil {
			return objHeader{}, malformed("object at %d: %v", off, err)
		}
		found := false
		for _, q := range append([]*packFile{p}, s.packs...) {
			baseOff, ok, err := q.lookup(ref)
			if err != nil {
				return objHeader{}, err
			}
			if ok {
				h.basePack, h.baseOff, found = q, baseOff, true
				break
			}
		}
		if !found {
			return objHeader{}, fmt.Errorf("%w: object at %d: base %s", packfile.ErrReferenceDeltaNotFound, off, ref)
		}
	case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
	default:
		return objHeader{}, malformed("object at %d: type %d", off, typ)
	}
	h.data = off + int64(len(raw)-r.Len())
	// Deflate expands at most about 1032 to 1: a larger size is damage, and
	// must not be allocated.
	if h.size > (p.trailer-h.data)*1032+64 {
		return objHeader{}, malformed("object at %d: %d bytes inflated from at most %d", off, h.size, p.trailer-h.data)
	}
	h.end = min(p.trailer, h.data+deflated(h.size))
	return h, nil
}

// inflateAt inflates the object's data whole, into a pooled buffer: its
// zlib stream read at once, as far as its bound (a stream longer than the
// bound, from an odd encoder, is streamed to its end).
func (s *packSet) inflateAt(p *packFile, h objHeader) ([]byte, error) {
	raw := getBuf(int(h.end - h.data))
	defer putBuf(raw)
	if _, err := p.f.ReadAt(raw, h.data); err != nil {
		return nil, fmt.Errorf("read object at %d: %w", h.data, err)
	}
	b, err := inflateSized(bytes.NewReader(raw), h.size)
	if err == nil || h.end == p.trailer {
		return b, err
	}
	z, err := inflate(io.NewSectionReader(p.f, h.data, p.trailer-h.data), h.size)
	if err != nil {
		return nil, err
	}
	defer z.Close()
	out := getBuf(int(h.size))
	if _, err := io.ReadFull(z, out); err != nil {
		putBuf(out)
		return nil, shortRead(err, h.size)
	}
	if err := atEOF(z); err != nil {
		putBuf(out)
		return nil, err
	}
	return out, nil
}

// openAt opens the object at [off, end) of p, resolving its delta chain:
// in memory when it and what it needs are small, else as a stream.
func (s *packSet) openAt(p *packFile, off int64, depth int) (plumbing.ObjectType, int64, io.ReadCloser, error) {
	if depth > maxDeltaDepth {
		return 0, 0, nil, malformed("object at %d: a delta chain deeper than %d", off, maxDeltaDepth)
	}
	h, err := s.header(p, off)
	if err != nil {
		return 0, 0, nil, err
	}
	if !h.typ.IsDelta() {
		if h.size <= streamAbove {
			data, err := s.inflateAt(p, h)
			if err != nil {
				return 0, 0, nil, fmt.Errorf("object at %d: %w", off, err)
			}
			return h.typ, h.size, newBlobReader(data), nil
		}
		z, err := inflate(io.NewSectionReader(p.f, h.data, p.trailer-h.data), h.size)
		return h.typ, h.size, z, err
	}
	btyp, base, err := s.base(h.basePack, h.baseOff, depth+1)
	if err != nil {
		return 0, 0, nil, err
	}
	var d delta
	closers := []io.Closer{base}
	var inMem []byte
	if h.size <= streamAbove {
		if inMem, err = s.inflateAt(p, h); err != nil {
			base.Close()
			return 0, 0, nil, fmt.Errorf("object at %d: %w", off, err)
		}
		d = bytes.NewReader(inMem)
		closers = append(closers, bufCloser(inMem))
	} else {
		z, err := inflate(io.NewSectionReader(p.f, h.data, p.trailer-h.data), h.size)
		if err != nil {
			base.Close()
			return 0, 0, nil, err
		}
		d = bufio.NewReaderSize(z, 32<<10)
		closers = append(closers, z)
	}
	bsize, target, err := deltaSizes(d)
	if err == nil && bsize != base.Size() {
		err = fmt.Errorf("%w: its base holds %d bytes, the delta says %d", packfile.ErrInvalidDelta, base.Size(), bsize)
	}
	if err != nil {
		closeAll(closers)
		return 0, 0, nil, fmt.Errorf("object at %d: %w", off, err)
	}
	if m, ok := base.(*memContent); ok && inMem != nil && target <= streamAbove {
		out, err := packfile.PatchDelta(m.b, inMem)
		closeAll(closers)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("object at %d: %w", off, err)
		}
		return btyp, target, newBlobReader(out), nil
	}
	return btyp, target, newDeltaReader(base, d, target, closers...), nil
}

type bufCloser []byte

func (b bufCloser) Close() error { putBuf(b); return nil }

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		c.Close()
	}
}

// base returns a delta base's type and content: from the cache when it
// is there, else made (in memory up to streamAbove, else in a scratch file
// of the cache). The caller closes it.
func (s *packSet) base(p *packFile, off int64, depth int) (plumbing.ObjectType, content, error) {
	k := baseKey{p, off}
	if typ, b, ok := s.bases.get(k); ok {
		return typ, newMem(b, true), nil
	}
	typ, size, rc, err := s.openAt(p, off, depth)
	if err != nil {
		return 0, nil, err
	}
	defer rc.Close()
	if br, ok := rc.(*blobReader); ok {
		b := br.buf
		br.buf = nil
		if !s.bases.fits(b) {
			return typ, newMem(b, false), nil
		}
		s.bases.put(k, typ, b)
		return typ, newMem(b, true), nil
	}
	c, err := materialise(rc, size, s.dir.Scratch)
	if err == nil {
		err = atEOF(rc)
	}
	if err != nil {
		if c != nil {
			c.Close()
		}
		return 0, nil, fmt.Errorf("delta base at %d: %w", off, err)
	}
	return typ, c, nil
}

// atEOF checks that r has nothing more to give (a stream then checks that
// it ends where its header said).
func atEOF(r io.Reader) error {
	var one [1]byte
	n, err := r.Read(one[:])
	if n > 0 {
		return errors.New("more bytes than its header says")
	}
	if err == io.EOF {
		return nil
	}
	return err
}

// inflateSized inflates exactly size bytes from r, and checks the stream
// ends there (its checksum included).
func inflateSized(r *bytes.Reader, size int64) ([]byte, error) {
	zr := zlibPool.Get().(*zlibReader)
	defer zlibPool.Put(zr)
	var err error
	if zr.r == nil {
		zr.r, err = zlib.NewReader(r)
	} else {
		err = zr.r.(zlib.Resetter).Reset(r, nil)
	}
	if err != nil {
		return nil, err
	}
	out := getBuf(int(size))
	if n, err := io.ReadFull(zr.r, out); err != nil {
		putBuf(out)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%d bytes, its header says %d", n, size)
		}
		return nil, err
	}
	var one [1]byte
	if n, err := zr.r.Read(one[:]); n > 0 || err != io.EOF {
		putBuf(out)
		if err == nil || err == io.EOF {
			return nil, fmt.Errorf("more than the %d bytes its header says", size)
		}
		return nil, err
	}
	return out, nil
}

type zlibReader struct{ r io.ReadCloser }

var zlibPool = sync.Pool{New: func() any { return new(zlibReader) }}

// Buffers are pooled by size class, powers of two from 4 KiB to
// 256 KiB: a small object never holds a large buffer. Larger ones are left
// to the collector, so the pools never pin much memory.
const (
	minBufShift = 12
	maxBufShift = 18
)

var bufPools [maxBufShift - minBufShift + 1]sync.Pool

// bufClass is the pool for buffers of n bytes, or -1.
func bufClass(n int) int {
	c := max(bits.Len(uint(max(n, 1)-1)), minBufShift) - minBufShift
	if c >= len(bufPools) {
		return -1
	}
	return c
}

// getBuf returns a buffer of n bytes, its content undefined.
func getBuf(n int) []byte {
	c := bufClass(n)
	if c < 0 {
		return make([]byte, n)
	}
	if p, ok := bufPools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<(c+minBufShift))
}

// putBuf hands back a buffer getBuf made.
func putBuf(b []byte) {
	if c := bufClass(cap(b)); c >= 0 && cap(b) == 1<<(c+minBufShift) {
		b = b[:0]
		bufPools[c].Put(&b)
	}
}

// blobReader is an object's content in memory; Close hands its buffer
// back.
type blobReader struct {
	bytes.Reader
	buf []byte
}

func newBlobReader(b []byte) *blobReader {
	r := &blobReader{buf: b}
	r.Reset(b)
	return r
}

func (r *blobReader) Close() error {
	if r.buf != nil {
		putBuf(r.buf)
		r.buf = nil
		r.Reset(nil)
	}
	return nil
}

// baseCacheBytes bounds the delta bases kept inflated.
const baseCacheBytes = 2 << 20

type baseKey struct {
	p   *packFile
	off int64
}

// baseCache is a small LRU of inflated delta bases.
type baseCache struct {
	mu    sync.Mutex
	max   int
	size  int
	items map[baseKey]*baseItem
	head  baseItem // sentinel of a ring, most recent first
}

type baseItem struct {
	k          baseKey
	typ        plumbing.ObjectType
	b          []byte
	prev, next *baseItem
}

func (c *baseCache) get(k baseKey) (plumbing.ObjectType, []byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.items[k]
	if !ok {
		return 0, nil, false
	}
	c.unlink(it)
	c.pushFront(it)
	return it.typ, it.b, true
}

// fits reports whether b is small enough to be kept.
func (c *baseCache) fits(b []byte) bool { return cap(b) <= c.max/4 }

func (c *baseCache) put(k baseKey, typ plumbing.ObjectType, b []byte) {
	if !c.fits(b) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.items == nil {
		c.items = map[baseKey]*baseItem{}
		c.head.prev, c.head.next = &c.head, &c.head
	}
	if _, ok := c.items[k]; ok {
		return
	}
	it := &baseItem{k: k, typ: typ, b: b}
	c.items[k] = it
	c.pushFront(it)
	c.size += cap(b)
	for c.size > c.max {
		old := c.head.prev
		c.unlink(old)
		delete(c.items, old.k)
		c.size -= cap(old.b)
	}
}

func (c *baseCache) unlink(it *baseItem) {
	it.prev.next, it.next.prev = it.next, it.prev
}

func (c *baseCache) pushFront(it *baseItem) {
	it.prev, it.next = &c.head, c.head.next
	c.head.next.prev = it
	c.head.next = it
}
