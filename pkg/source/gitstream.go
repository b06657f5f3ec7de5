package source

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/klauspost/compress/zlib"
)

// streamAbove is the size past which an object is never held whole in
// memory: it is inflated, delta-applied and hashed as it streams, and a
// delta base of that size is kept in a scratch file in the cache and read
// with ReadAt. Memory then does not grow with the largest blob.
var streamAbove int64 = 1 << 20

// content is an object's content with random access: a delta base.
type content interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// memContent is content in memory. Close hands the buffer back unless
// it is shared (a cached base).
type memContent struct {
	*bytes.Reader
	b      []byte
	shared bool
}

func newMem(b []byte, shared bool) *memContent {
	return &memContent{Reader: bytes.NewReader(b), b: b, shared: shared}
}

func (m *memContent) Close() error {
	if !m.shared && m.b != nil {
		putBuf(m.b)
	}
	m.b = nil
	return nil
}

// fileContent is content in a scratch file, gone once closed.
type fileContent struct {
	f    *os.File
	size int64
}

func (c *fileContent) ReadAt(p []byte, off int64) (int, error) { return c.f.ReadAt(p, off) }
func (c *fileContent) Size() int64                             { return c.size }
func (c *fileContent) Close() error                            { return c.f.Close() }

// copyBufs are the buffers content is copied through.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// copyBuffered copies r to w through a pooled buffer.
func copyBuffered(w io.Writer, r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r}, *bp)
}

// materialise reads exactly size bytes of r as content: in memory up to
// streamAbove, else in a scratch file from scratch.
func materialise(r io.Reader, size int64, scratch func() (*os.File, error)) (content, error) {
	if size <= streamAbove {
		b := getBuf(int(size))
		if _, err := io.ReadFull(r, b); err != nil {
			putBuf(b)
			return nil, shortRead(err, size)
		}
		return newMem(b, false), nil
	}
	f, err := scratch()
	if err != nil {
		return nil, fmt.Errorf("scratch file for a delta base: %w", err)
	}
	n, err := copyBuffered(f, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("%d bytes, its header says %d", n, size)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &fileContent{f: f, size: size}, nil
}

func shortRead(err error, size int64) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("fewer bytes than the %d its header says", size)
	}
	return err
}

// inflater streams a zlib stream of exactly size bytes and checks, at its
// end, that the stream ends there too (its checksum included).
type inflater struct {
	zr   *zlibReader
	br   *bufio.Reader
	left int64
	size int64
	err  error
}

var bufReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

// inflate streams the zlib data in r, size bytes once inflated.
func inflate(r io.Reader, size int64) (*inflater, error) {
	br := bufReaders.Get().(*bufio.Reader)
	br.Reset(r)
	zr := zlibPool.Get().(*zlibReader)
	var err error
	if zr.r == nil {
		zr.r, err = zlib.NewReader(br)
	} else {
		err = zr.r.(zlib.Resetter).Reset(br, nil)
	}
	if err != nil {
		zlibPool.Put(zr)
		bufReaders.Put(br)
		return nil, err
	}
	return &inflater{zr: zr, br: br, left: size, size: size}, nil
}

func (z *inflater) Read(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	if z.left == 0 {
		var one [1]byte
		if n, err := z.zr.r.Read(one[:]); n > 0 || err != io.EOF {
			if err == nil || err == io.EOF {
				err = fmt.Errorf("more than the %d bytes its header says", z.size)
			}
			z.err = err
			return 0, err
		}
		z.err = io.EOF
		return 0, io.EOF
	}
	if int64(len(p)) > z.left {
		p = p[:z.left]
	}
	n, err := z.zr.r.Read(p)
	z.left -= int64(n)
	if err == io.EOF && z.left > 0 {
		err = fmt.Errorf("%d bytes, its header says %d", z.size-z.left, z.size)
	}
	if err != nil && err != io.EOF {
		z.err = err
		return n, err
	}
	return n, nil
}

// ReadByte serves the delta decoder.
func (z *inflater) ReadByte() (byte, error) {
	var b [1]byte
	for {
		n, err := z.Read(b[:])
		if n == 1 {
			return b[0], nil
		}
		if err != nil {
			return 0, err
		}
	}
}

func (z *inflater) Close() error {
	if z.zr != nil {
		zlibPool.Put(z.zr)
		z.br.Reset(nil)
		bufReaders.Put(z.br)
		z.zr, z.br = nil, nil
	}
	if z.err == nil {
		z.err = errors.New("read after close")
	}
	return nil
}

// deltaSizes reads a delta's header: the sizes of its base and of what it
// makes (git's little-endian base-128 varints).
func deltaSizes(r io.ByteReader) (base, target int64, err error) {
	if base, err = deltaVarint(r); err == nil {
		target, err = deltaVarint(r)
	}
	return base, target, err
}

func deltaVarint(r io.ByteReader) (int64, error) {
	var v int64
	for shift := 0; ; shift += 7 {
		if shift > 56 {
			return 0, fmt.Errorf("%w: a size that overflows", packfile.ErrInvalidDelta)
		}
		c, err := r.ReadByte()
		if err != nil {
			return 0, fmt.Errorf("%w: %v", packfile.ErrInvalidDelta, err)
		}
		v |= int64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

// deltaReader makes a delta's target as it is read: copies from the base
// (read with ReadAt) and literal bytes from the delta stream, which is
// read past its header. Nothing is held beyond the caller's buffer.
type deltaReader struct {
	base     content
	delta    io.ByteReader // the instructions, after the header
	deltaR   io.Reader     // the same stream, for literal runs
	closers  []io.Closer
	left     int64 // target bytes not yet made
	copyOff  int64 // the copy in progress
	copyLeft int64
	insLeft  int64 // the literal run in progress
	err      error
}

// delta is a delta stream: an io.ByteReader that reads in runs too.
type delta interface {
	io.Reader
	io.ByteReader
}

// newDeltaReader applies d (its header already read: base and target
// sizes) to base. closers are closed with it.
func newDeltaReader(base content, d delta, target int64, closers ...io.Closer) *deltaReader {
	return &deltaReader{base: base, delta: d, deltaR: d, left: target, closers: closers}
}

func (r *deltaReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n := 0
	for n < len(p) {
		switch {
		case r.copyLeft > 0:
			k := int(min(int64(len(p)-n), r.copyLeft))
			m, err := r.base.ReadAt(p[n:n+k], r.copyOff)
			n += m
			r.copyOff += int64(m)
			r.copyLeft -= int64(m)
			r.left -= int64(m)
			if m < k {
				return n, r.fail(fmt.Errorf("read delta base: %w", shortRead(err, r.base.Size())))
			}
		case r.insLeft > 0:
			k := int(min(int64(len(p)-n), r.insLeft))
			m, err := io.ReadFull(r.deltaR, p[n:n+k])
			n += m
			r.insLeft -= int64(m)
			r.left -= int64(m)
			if err != nil {
				return n, r.fail(fmt.Errorf("%w: %v", packfile.ErrInvalidDelta, err))
			}
		case r.left == 0:
			// The target is made: the delta must end here.
			if _, err := r.delta.ReadByte(); err != io.EOF {
				if err == nil {
					err = fmt.Errorf("%w: instructions past its target size", packfile.ErrInvalidDelta)
				}
				return n, r.fail(err)
			}
			r.err = io.EOF
			if n > 0 {
				return n, nil
			}
			return 0, io.EOF
		default:
			if err := r.next(); err != nil {
				return n, r.fail(err)
			}
		}
	}
	return n, nil
}

// next decodes the next instruction.
func (r *deltaReader) next() error {
	cmd, err := r.delta.ReadByte()
	if err != nil {
		return fmt.Errorf("%w: it ends %d bytes short of its target", packfile.ErrInvalidDelta, r.left)
	}
	if cmd&0x80 == 0 {
		if cmd == 0 {
			return packfile.ErrDeltaCmd
		}
		r.insLeft = int64(cmd)
		if r.insLeft > r.left {
			return packfile.ErrInvalidDelta
		}
		return nil
	}
	var off, size int64
	for i := range 4 {
		if cmd&(1<<i) != 0 {
			b, err := r.delta.ReadByte()
			if err != nil {
				return packfile.ErrInvalidDelta
			}
			off |= int64(b) << (8 * i)
		}
	}
	for i := range 3 {
		if cmd&(0x10<<i) != 0 {
			b, err := r.delta.ReadByte()
			if err != nil {
				return packfile.ErrInvalidDelta
			}
			size |= int64(b) << (8 * i)
		}
	}
	if size == 0 {
		size = 0x10000
	}
	if size > r.left || off+size > r.base.Size() {
		return packfile.ErrInvalidDelta
	}
	r.copyOff, r.copyLeft = off, size
	return nil
}

func (r *deltaReader) fail(err error) error {
	r.err = err
	return err
}

func (r *deltaReader) Close() error {
	var errs []error
	for _, c := range r.closers {
		errs = append(errs, c.Close())
	}
	r.closers = nil
	if r.err == nil {
		r.err = errors.New("read after close")
	}
	return errors.Join(errs...)
}
