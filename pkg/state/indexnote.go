package state

import (
	"encoding/binary"
	"hash/crc32"
)

// A base checked whole is noted beside it (<index>.checked) by the same
// identity the process's own memory keys it by (checkedID), with what the
// check counted: a command in a fresh process then trusts a base that
// nothing wrote since, where it read it whole again each time (the
// checksums and every row and path, 3% of a converged diff of 11,478
// files; Git's own index is hashed whole at each load, ours need not be).
//
// A note is a hint, never the record: one that is missing, torn, of
// another file or of the same file since changed (its inode, size, mtime
// or ctime moved: any write moves the ctime) is ignored and the base
// checked whole. It is written without an fsync: a crash that loses it
// costs one more check. What it cannot see is a base altered under the
// filesystem (a disk's own fault), which the checksums would have caught:
// `state check` therefore never reads notes.
const (
	checkedSuffix = ".checked"
	noteMagic     = "CSCK\x01"
	noteSize      = len(noteMagic) + 1 + 5*8 + 2*8 + 4
)

// readCheckNote returns what the note at note says of the base of
// identity id, if it notes that very file.
func readCheckNote(note File, id baseIdentity) (checkedBase, bool) {
	if note == (File{}) {
		return checkedBase{}, false
	}
	f, err := note.open()
	if err != nil {
		return checkedBase{}, false
	}
	defer f.Close()
	var b [noteSize + 1]byte // one more: a longer file is no note
	n, _ := f.ReadAt(b[:], 0)
	got, ok := decodeCheckNote(b[:n])
	if !ok || got.id != id {
		return checkedBase{}, false
	}
	return got.base, true
}

// writeCheckNote notes that the base of identity id was checked whole; a
// failure (a state dir this process cannot write) leaves no note.
func writeCheckNote(note File, id baseIdentity, c checkedBase) {
	if note == (File{}) {
		return
	}
	h, name, err := note.dir.parent(note.name, false)
	if err != nil {
		return
	}
	defer h.Close()
	f, tmp, err := h.CreateTemp(name)
	if err != nil {
		return
	}
	defer h.Remove(tmp) // gone once renamed
	_, err = f.Write(encodeCheckNote(checkNote{id, c}))
	if cerr := f.Close(); err == nil && cerr == nil {
		h.Rename(tmp, name)
	}
}

type checkNote struct {
	id   baseIdentity
	base checkedBase
}

func encodeCheckNote(n checkNote) []byte {
	b := make([]byte, 0, noteSize)
	b = append(b, noteMagic...)
	marked := byte(0)
	if n.id.marked {
		marked = 1
	}
	le := binary.LittleEndian
	b = append(b, marked)
	for _, v := range []uint64{n.id.dev, n.id.ino, uint64(n.id.size), uint64(n.id.ctime), uint64(n.id.mtime),
		uint64(n.base.live), uint64(n.base.changed)} {
		b = le.AppendUint64(b, v)
	}
	return le.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func decodeCheckNote(b []byte) (checkNote, bool) {
	le := binary.LittleEndian
	if len(b) != noteSize || string(b[:len(noteMagic)]) != noteMagic || b[len(noteMagic)] > 1 ||
		le.Uint32(b[noteSize-4:]) != crc32.Checksum(b[:noteSize-4], crcTable) {
		return checkNote{}, false
	}
	v := func(i int) uint64 { return le.Uint64(b[len(noteMagic)+1+8*i:]) }
	n := checkNote{
		id:   baseIdentity{dev: v(0), ino: v(1), size: int64(v(2)), ctime: int64(v(3)), mtime: int64(v(4)), marked: b[len(noteMagic)] == 1},
		base: checkedBase{live: int(v(5)), changed: int(v(6))},
	}
	if n.base.live < 0 || n.base.changed < 0 {
		return checkNote{}, false
	}
	return n, true
}
