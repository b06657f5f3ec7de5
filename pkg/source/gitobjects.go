package source

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/klauspost/compress/zlib"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// packStorer serves go-git the cache's objects: from its packs, read in
// place, else from its loose objects. Nothing is read through go-git's
// own object storage, which loads every pack index of the cache into the
// heap on its first read (about 140 MB at a million objects). Writes and
// everything else go to the storage it wraps.
type packStorer struct {
	storer.EncodedObjectStorer
	packs *packSet
	// current, when set, gives the packs instead: those of the cache now,
	// for objects that outlive a fetch (a commit read before its history
	// was deepened).
	current func() *packSet
}

func (s *packStorer) set() *packSet {
	if s.current != nil {
		return s.current()
	}
	return s.packs
}

func (s *packStorer) EncodedObject(typ plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	packs := s.set()
	otyp, data, err := packs.read(h)
	pooled := err == nil
	if errors.Is(err, errNotPacked) {
		otyp, data, err = readLoose(packs.dir, h)
	}
	if err != nil {
		return nil, err
	}
	if pooled {
		defer putBuf(data)
	}
	if typ != plumbing.AnyObject && otyp != typ {
		return nil, plumbing.ErrObjectNotFound
	}
	obj := &plumbing.MemoryObject{}
	obj.SetType(otyp)
	obj.Write(data)
	return obj, nil
}

func (s *packStorer) HasEncodedObject(h plumbing.Hash) error {
	packs := s.set()
	_, _, err := packs.locate(h)
	if errors.Is(err, errNotPacked) {
		_, err = looseSize(packs.dir, h)
	}
	return err
}

func (s *packStorer) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	packs := s.set()
	n, err := packs.size(h)
	if errors.Is(err, errNotPacked) {
		return looseSize(packs.dir, h)
	}
	return n, err
}

// openLoose opens the loose object h of the cache at dir and reads its
// header; plumbing.ErrObjectNotFound when there is none.
func openLoose(dir state.Dir, h plumbing.Hash) (plumbing.ObjectType, int64, io.ReadCloser, error) {
	hex := h.String()
	name := "objects/" + hex[:2] + "/" + hex[2:]
	f, err := dir.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil, plumbing.ErrObjectNotFound
	}
	if err != nil {
		return 0, 0, nil, err
	}
	bad := func(what string) error {
		f.Close()
		return fmt.Errorf("loose object %s: %s", dir.File(name), what)
	}
	zr, err := zlib.NewReader(bufio.NewReader(f))
	if err != nil {
		return 0, 0, nil, bad(err.Error())
	}
	br := bufio.NewReaderSize(zr, 512)
	head, err := br.ReadSlice(0)
	if err != nil {
		return 0, 0, nil, bad("no header")
	}
	word, num, ok := bytes.Cut(head[:len(head)-1], []byte(" "))
	typ, terr := plumbing.ParseObjectType(string(word))
	size, serr := strconv.ParseInt(string(num), 10, 64)
	if !ok || terr != nil || serr != nil || size < 0 {
		return 0, 0, nil, bad(fmt.Sprintf("header %q", head))
	}
	return typ, size, &looseReader{Reader: io.LimitReader(br, size), f: f}, nil
}

type looseReader struct {
	io.Reader
	f *os.File
}

func (r *looseReader) Close() error { return r.f.Close() }

// readLoose reads the loose object h whole.
func readLoose(dir state.Dir, h plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	typ, size, rc, err := openLoose(dir, h)
	if err != nil {
		return 0, nil, err
	}
	defer rc.Close()
	data, err := readAllSized(rc, size)
	if err == nil && int64(len(data)) != size {
		err = fmt.Errorf("loose object %s: %d bytes, its header says %d", h, len(data), size)
	}
	return typ, data, err
}

// looseSize is the size of the loose object h.
func looseSize(dir state.Dir, h plumbing.Hash) (int64, error) {
	_, size, rc, err := openLoose(dir, h)
	if err != nil {
		return 0, err
	}
	rc.Close()
	return size, nil
}
