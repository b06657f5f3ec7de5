package index

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// A base checked whole is noted beside it (<index>.checked) by the same
// identity the process's own memory keys it by (checkedID): a command in
// a fresh process then trusts a base that nothing wrote since, where it
// read it whole again each time (the checksums and every row and path,
// 3% of a converged diff of 11,478 files; Git's own index is hashed whole
// at each load, ours need not be).
//
// A note is a hint, never the record, and says nothing but that: one
// that is missing, torn, of another file or of the same file since
// changed (its inode, size, mtime or ctime moved: any write moves the
// ctime), or written by a cortex-sync that checked less (noteChecks), is
// ignored and the base checked whole. What a check counts follows from
// the base itself: a saved base marks no row (dead or changed), so each
// of its rows is a live entry. A note is written without an fsync: a
// crash that loses it costs one more check. What it cannot see is a base
// altered under the filesystem (a disk's own fault), which the checksums
// would have caught: `state check` therefore never reads notes.
const (
	checkedSuffix = ".checked"
	noteMagic     = "CSCK\x01"
	// noteChecks names what parseBase checks: a cortex-sync that checks
	// more raises it, and the notes of the checks before are ignored.
	noteChecks = 1
	noteSize   = len(noteMagic) + 1 + 5*8 + 4
)

// noted reports whether the note at note says the base of identity id
// was checked whole.
func noted(note state.File, id baseIdentity) bool {
	if note == (state.File{}) || id.marked {
		return false
	}
	f, err := note.Open()
	if err != nil {
		return false
	}
	defer f.Close()
	var b [noteSize + 1]byte // one more: a longer file is no note
	n, _ := f.ReadAt(b[:], 0)
	got, ok := decodeCheckNote(b[:n])
	return ok && got == id
}

// writeCheckNote notes that the base of identity id was checked whole; a
// failure (a state dir this process cannot write) leaves no note.
func writeCheckNote(note state.File, id baseIdentity) {
	if note == (state.File{}) || id.marked {
		return
	}
	h, err := note.Dir().Open(false)
	name := note.Name()
	if err != nil {
		return
	}
	defer h.Close()
	f, tmp, err := h.CreateTemp(name)
	if err != nil {
		return
	}
	defer h.Remove(tmp) // gone once renamed
	_, err = f.Write(encodeCheckNote(id))
	if cerr := f.Close(); err == nil && cerr == nil {
		h.Rename(tmp, name)
	}
}

func encodeCheckNote(id baseIdentity) []byte {
	le := binary.LittleEndian
	b := append(make([]byte, 0, noteSize), noteMagic...)
	b = append(b, noteChecks)
	for _, v := range []uint64{id.dev, id.ino, uint64(id.size), uint64(id.ctime), uint64(id.mtime)} {
		b = le.AppendUint64(b, v)
	}
	return le.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func decodeCheckNote(b []byte) (baseIdentity, bool) {
	le := binary.LittleEndian
	if len(b) != noteSize || string(b[:len(noteMagic)]) != noteMagic || b[len(noteMagic)] != noteChecks ||
		le.Uint32(b[noteSize-4:]) != crc32.Checksum(b[:noteSize-4], crcTable) {
		return baseIdentity{}, false
	}
	v := func(i int) uint64 { return le.Uint64(b[len(noteMagic)+1+8*i:]) }
	return baseIdentity{dev: v(0), ino: v(1), size: int64(v(2)), ctime: int64(v(3)), mtime: int64(v(4))}, true
}
