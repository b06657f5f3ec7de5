package source

import (
	"bytes"
	"crypto/sha1"
	"errors"
	"hash"
	"io"
	"os"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// packStore is the cache's storage with go-git's pack writer replaced, and
// its object reads too. go-git's packfile.Parser inflates every object
// twice (once to find where it ends, once more to resolve deltas) and
// holds every object's state in memory; packIndexer inflates each object
// once while the pack arrives, in bounded memory. go-git's fetch reads the
// objects it needs (commits of the refs it has, its wants) through the
// packs, read in place.
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
	w.ix.close()
	w.f.Close()
	w.dir.Remove(w.tmp) // gone already when installed
	w.dir.Close()
	return err
}

func (w *packWriter) install() error {
	name := "pack-" + w.ix.checksum.String()
	tmp, tmpName, err := w.dir.CreateTemp(name + ".idx")
	if err != nil {
		return err
	}
	defer w.dir.Remove(tmpName)
	if err := w.ix.recs.writeIndex(tmp, w.ix.checksum); err != nil {
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
