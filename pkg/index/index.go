// Package index is the quick drift check's memory, like git's index: the
// fingerprint of every file of a mirrored tree (trees/<id>.idx) and a
// directory source's stat cache (cache/*.idx), kept in the state dir behind
// its door (state.File). An index is a binary base read in place, a log of
// what changed since, and an intent log of what a write is about to create.
package index

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"iter"
	"math"
	"os"
	"slices"
	"syscall"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Index maps relative paths to fingerprints: the per-file memory of a
// mirrored tree, or the stat cache of a directory source. It is a compact
// binary file read in place (base.go), because decoding ten thousand
// entries costs more than the drift check they serve, and holding them
// costs more memory than the check needs.
//
// On disk an index is a base file and a log beside it (the base's name and
// ".log"): Save appends only the entries set or deleted since the index was
// loaded, and rewrites the base whole once the log outgrows a share of it.
//
// An Index is not safe for concurrent use.
type Index struct {
	// The entries, read with Get, ChildrenOf, Scan and All, changed with Set,
	// Touch and Delete so that Save can write only what changed (see
	// mem.go).
	base          *base // nil: none
	logged, added layer
	addedBytes    int       // what added holds on the heap (lentBytes)
	runs          []*base   // what was added before, written out (mem.go), oldest first
	n             int       // entries
	spill         state.Dir // where checkpoints go; none: the layers stay in memory
	spillFailed   int       // the layers' size when a checkpoint last failed
	replaying     bool      // the log is being replayed: no checkpoint
	rewrite       bool      // the base is of an older format: Save writes a new one
	// format2 is set when the base on disk is of format 2: the next save
	// writes it whole, in format 3, rather than log what an older
	// cortex-sync would read as the torn end of its log (frames that
	// carry an XXH3) and cut off, forgetting what it wrote. An older one
	// refuses the new base by name instead.
	format2 bool
	// ref is the index files' newest mtime when loaded: entries whose
	// timestamps are not older are racily clean (git's rule) and must be
	// hashed.
	ref int64
	// disk is the base file the log extends, as loaded; zero when there
	// was none.
	disk     baseID
	diskFile fileID // the base file as loaded (cache.go)
	logValid int64  // bytes of the log that decoded; a torn tail is cut off
	logSum   uint32 // the CRC-32C of those bytes
	logOK    bool   // the log exists, extends the base, and can be appended to
	// file is where the index is saved; the zero File: it is kept in
	// memory.
	file state.File
	// intents are what writes that were stopped before they saved the
	// index were about to create, as loaded (intent.go); intentLog:
	// an intent log was there; ilog is the one this index appends to,
	// once it did.
	intents   layer
	intentLog bool
	ilog      *intentLog
}

// Entry is one file's fingerprint.
type Entry struct {
	hostfs.Stat
	SHA256    string // of the content written, hex
	Target    string // a symlink's target (kept where a file keeps its SHA256)
	ContentID string // the source's name for the desired content
	// XXH3 is the XXH3-128 of the content written (zero: not known):
	// what --verify reads a file by while its stat is the one recorded,
	// at rsync -c's cost (without --verify that file is not read at all).
	// Not a cryptographic hash: a file whose stat moved, and whether what
	// a prune would delete is cortex-sync's, are the SHA-256's to judge.
	XXH3 [16]byte
}

// New is an empty index that keeps what is set in memory.
func New() *Index { return &Index{} }

// NewAt is an empty index to be saved as f: a large one spills
// beside it.
func NewAt(f state.File) *Index { return &Index{spill: f.Dir(), file: f} }

// Racy reports whether a file whose stat matches st, as recorded, may
// still have changed unseen: its timestamps are as new as the index itself.
func (x *Index) Racy(st hostfs.Stat) bool { return x.RacyRule().Racy(st) }

// RacyRule is Racy as the index stands, a value that the goroutines of a
// pass ask without a lock while the index is written: only a load or a
// save moves the index's own rule, and that forward, so a rule taken
// earlier only finds more entries racy.
func (x *Index) RacyRule() RacyRule { return RacyRule{x.ref} }

// RacyRule tells racily clean entries by the index files' newest mtime.
type RacyRule struct{ ref int64 }

// Racy is Index.Racy as the rule was taken.
func (r RacyRule) Racy(st hostfs.Stat) bool {
	return r.ref == 0 || st.Mtime >= r.ref || st.Ctime >= r.ref
}

// indexMagic starts an index of format 1, an entry after another in
// varints, which is read and rewritten as format 2 by the next save.
const indexMagic = "CSIX\x01"

// ErrCorrupt reports an index file that is truncated or damaged.
var ErrCorrupt = errors.New("index is corrupt")

// Load opens an index, replays its log and reads its intents; a
// missing file is an empty index. A log this process loaded or saved last
// is not replayed again (cache.go). A damaged base is an error wrapping
// ErrCorrupt and naming the file; a damaged log ends where the
// damage starts (it only ever loses the last writes, as a torn append
// would), and so does the intent log. The base stays open, read as it is
// used. A base checked whole before, and not written since, is trusted
// by the note of that check beside it (note.go).
func Load(path state.File) (*Index, error) {
	return load(path, trust{note: path.With(checkedSuffix)})
}

// loadIndex is Load, taking the base to be checked by what by says.
func load(path state.File, by trust) (*Index, error) {
	x := NewAt(path)
	if err := x.loadIntents(path); err != nil {
		return nil, err
	}
	f, err := path.Open()
	if errors.Is(err, fs.ErrNotExist) {
		loaded.forget(path)
		return x, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read index: %w", err)
	}
	var magic [len(indexMagic)]byte
	f.ReadAt(magic[:], 0)
	if string(magic[:]) == indexMagic {
		// Format 1: read whole, once, and converted.
		f.Close()
		data, _, err := readBounded(path)
		if err == nil {
			x.base, err = convertIndex(data, x.spill)
		}
		if err != nil {
			return nil, loadError(path, err)
		}
		x.rewrite = true
	} else if x.base, err = parseBase(f, nil, fi.Size(), false, by); err == nil {
		x.format2 = x.base.rowLen == rowSize2
	} else {
		f.Close()
		return nil, loadError(path, err)
	}
	x.n = x.base.live
	x.disk, x.diskFile = baseOf(fi), fileIDOf(fi)
	x.ref = fi.ModTime().UnixNano()
	if err := x.replay(path.With(logSuffix)); err != nil {
		return nil, err
	}
	return x, nil
}

// loadError names the index; only a damaged one is to be deleted.
func loadError(path state.File, err error) error {
	if errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("%s: %w; delete it and run with --verify", path, err)
	}
	return fmt.Errorf("read index %s: %w", path, err)
}

// decodeIndex reads an index file's bytes in memory; any fault is an
// error wrapping ErrCorrupt.
func decodeIndex(data []byte) (*Index, error) {
	x := New()
	var err error
	if bytes.HasPrefix(data, []byte(indexMagic)) {
		x.base, err = convertIndex(data, state.Dir{})
		x.rewrite = true
	} else {
		x.base, err = parseBase(nil, data, int64(len(data)), false, trust{})
	}
	if err != nil {
		return nil, err
	}
	x.n = x.base.live
	return x, nil
}

// readBounded reads a file whole: its real size, never a count inside it,
// bounds what decoding allocates.
func readBounded(path state.File) ([]byte, fs.FileInfo, error) {
	f, err := path.Open()
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data, err := readAll(f)
	if err != nil {
		return nil, nil, err
	}
	return data, fi, nil
}

// minIndexEntry is the fewest bytes an entry of format 1 takes: one for
// each of its three string lengths and seven numbers.
const minIndexEntry = 10

// convertIndex reads an index of format 1 into a base of format 2, in an
// unnamed file in dir; in memory when dir is "", or cannot take the file
// (a state dir its reader cannot write, as for a diff by another user, or
// a full disk): it is held there until the next save.
func convertIndex(data []byte, dir state.Dir) (*base, error) {
	if !dir.IsZero() {
		if f, err := dir.Scratch(); err == nil {
			size, err := convertTo(f, data)
			if errors.Is(err, ErrCorrupt) {
				f.Close()
				return nil, err
			}
			if err == nil {
				b, err := parseBase(f, nil, size, false, trust{})
				if err != nil {
					f.Close()
				}
				return b, err
			}
			f.Close()
		}
	}
	m := &memFile{}
	if _, err := convertTo(m, data); err != nil {
		return nil, err
	}
	return parseBase(nil, m.b, int64(len(m.b)), false, trust{})
}

// convertTo writes an index of format 1 to out as a base of format 2, and
// returns the base's size.
func convertTo(out io.WriterAt, data []byte) (int64, error) {
	d := &indexDecoder{b: data, off: len(indexMagic)}
	n := d.uvarint("entry count")
	if rest := uint64(len(data) - d.off); d.err == nil && n > rest/minIndexEntry {
		d.fail("%d entries claimed in %d bytes", n, rest)
	}
	if d.err != nil {
		return 0, d.err
	}
	w := newBaseWriter(out, int(n))
	prev := ""
	for i := range n {
		d.entry = i + 1
		p := d.str("path")
		// Paths were written sorted and unique; anything else is damage.
		if d.err == nil && i > 0 && p <= prev {
			d.fail("path %q out of order", p)
		}
		e := d.indexEntry()
		if d.err != nil {
			return 0, d.err
		}
		r, str, cid := encodeEntry(e)
		w.add(&item{path: p, r: r, str: str, cid: cid})
		prev = p
	}
	if d.off != len(data) {
		d.entry = 0
		d.fail("%d bytes of trailing data", len(data)-d.off)
		return 0, d.err
	}
	if err := w.finish(); err != nil {
		return 0, err
	}
	return w.size(), nil
}

// indexEntry decodes an entry's fields after its path.
func (d *indexDecoder) indexEntry() *Entry {
	e := &Entry{}
	e.Ino = d.uvarint("inode")
	e.Mode = fs.FileMode(d.uint32("mode"))
	e.UID = d.uint32("uid")
	e.GID = d.uint32("gid")
	e.Size = d.varint("size")
	e.Mtime = d.varint("mtime")
	e.Ctime = d.varint("ctime")
	if e.Mode&fs.ModeSymlink != 0 {
		e.Target = d.str("target")
	} else {
		e.SHA256 = d.str("sha256")
	}
	e.ContentID = d.str("content ID")
	return e
}

// indexDecoder reads the index encoding from memory. After the first fault
// every read returns zero and err keeps that fault.
type indexDecoder struct {
	b     []byte
	off   int
	entry uint64 // 1-based number of the entry being read; 0 outside entries
	err   error
}

func (d *indexDecoder) fail(format string, args ...any) {
	if d.err != nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if d.entry > 0 {
		msg = fmt.Sprintf("entry %d: %s", d.entry, msg)
	}
	d.err = fmt.Errorf("%w: %s", ErrCorrupt, msg)
}

func (d *indexDecoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.short(what, n)
		return 0
	}
	d.off += n
	return v
}

func (d *indexDecoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.short(what, n)
		return 0
	}
	d.off += n
	return v
}

func (d *indexDecoder) short(what string, n int) {
	if n == 0 {
		d.fail("truncated in %s at byte %d", what, d.off)
	} else {
		d.fail("%s overflows at byte %d", what, d.off)
	}
}

func (d *indexDecoder) uint32(what string) uint32 {
	v := d.uvarint(what)
	if v > math.MaxUint32 {
		d.fail("%s %d out of range", what, v)
		return 0
	}
	return uint32(v)
}

func (d *indexDecoder) str(what string) string {
	l := d.uvarint(what)
	if d.err != nil {
		return ""
	}
	if l > uint64(len(d.b)-d.off) {
		d.fail("%s of %d bytes at byte %d runs past the end", what, l, d.off)
		return ""
	}
	s := string(d.b[d.off : d.off+int(l)])
	d.off += int(l)
	return s
}

// Save writes what changed since the load: appended to the log when the
// log extends the base on disk and stays small beside it, else as a new
// base (atomically) that makes the log stale. The index then reads what
// was saved, and the intents still beside it.
func (x *Index) Save(path state.File) error {
	if err := x.save(path); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	x.closeIntents()
	y, err := Load(path)
	if err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	*x = *y // what x read goes with it: a Scan made before reads on
	return nil
}

func (x *Index) save(path state.File) error {
	if err := x.readErr(); err != nil {
		return err // what was read of the base cannot be trusted
	}
	if !x.changed() && x.disk != (baseID{}) {
		return nil // as loaded
	}
	logPath := path.With(logSuffix)
	if x.disk != (baseID{}) && !x.rewrite && !x.format2 {
		fi, err := path.Stat()
		if err == nil && baseOf(fi) == x.disk {
			limit := min(max(minLogCap, x.disk.size/4), maxLogCap)
			if frame := encodeFrame(x.changes(), limit-x.logValid); frame != nil {
				return x.appendLog(logPath, frame)
			}
		}
	}
	// A new base, written whole; the log it replaces names the old base, so
	// should the removal below not happen, the next load ignores it.
	err := path.Dir().WriteFunc(path.Name(), func(f *os.File) error { return x.writeBase(f) })
	if err != nil {
		return err
	}
	return logPath.Dir().Remove(logPath.Name())
}

// appendLog adds a frame to the log and fsyncs it; a log that does not yet
// extend the base is started anew, atomically, with its header.
func (x *Index) appendLog(logPath state.File, frame []byte) error {
	if !x.logOK {
		data := append(x.disk.header(), frame...)
		if err := logPath.Dir().WriteFile(logPath.Name(), data); err != nil {
			return err
		}
		x.logValid, x.logOK, x.logSum = int64(len(data)), true, logSumOf(0, data)
	} else {
		f, err := logPath.Dir().OpenFile(logPath.Name(), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		// Cut a torn tail first, so the frame follows the last good one.
		if err := f.Truncate(x.logValid); err != nil {
			f.Close()
			return err
		}
		if _, err := f.WriteAt(frame, x.logValid); err != nil {
			f.Close()
			return err
		}
		if err := syncClose(f); err != nil {
			return err
		}
		x.logValid += int64(len(frame))
		x.logSum = logSumOf(x.logSum, frame)
	}
	fi, err := logPath.Stat()
	if err != nil {
		loaded.forget(x.file)
		return nil
	}
	x.ref = fi.ModTime().UnixNano()
	x.appended(fileIDOf(fi))
	return nil
}

const (
	logSuffix = ".log"
	logMagic  = "CSIL\x01"
	// minLogCap is the size a log may reach before the base is rewritten,
	// or a quarter of the base when that is more, up to maxLogCap: a
	// load replays the log onto the heap, and a save builds its frame
	// there (a quarter of the base of 1,000,000 files is 40 MB).
	minLogCap = 64 << 10
	maxLogCap = 4 << 20
)

// baseID names a base file: a log extends the base whose inode, size and
// mtime its header repeats. A rewritten base is a new file (a new inode,
// created while the old one still exists), so a stale log never matches.
type baseID struct {
	ino, size, mtime int64
}

func baseOf(fi fs.FileInfo) baseID {
	id := baseID{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = int64(st.Ino)
	}
	return id
}

func (b baseID) header() []byte {
	out := []byte(logMagic)
	out = binary.AppendVarint(out, b.ino)
	out = binary.AppendVarint(out, b.size)
	return binary.AppendVarint(out, b.mtime)
}

// encodeFrame is records as a frame of a log (one save's changes, or one
// batch of intents): a uvarint length, the CRC-32C of the payload, and the
// payload: the record count, then per record a path, a flag (0: set, 1:
// deleted, 2: set with an XXH3) and, when set, the entry as in an index
// of format 1, then with flag 2 the XXH3's 16 bytes. It is nil when the
// frame would exceed limit bytes: known from the records' least sizes
// before a byte is written, where they exceed it already (a save of a
// long write's changes, which a new base then holds).
func encodeFrame(recs iter.Seq2[string, *Entry], limit int64) []byte {
	count, least := 0, int64(0)
	for p, e := range recs {
		count++
		if least += leastRecord(p, e); least > limit {
			return nil
		}
	}
	var b bytes.Buffer
	b.Grow(int(min(least+least/4, limit)))
	w := entryWriter{b: &b}
	w.uv(uint64(count))
	for p, e := range recs {
		if int64(b.Len()) > limit {
			return nil
		}
		w.str(p)
		switch {
		case e == nil:
			b.WriteByte(1)
		case e.XXH3 != [16]byte{} && e.Mode&fs.ModeSymlink == 0:
			b.WriteByte(2)
			w.entry(e)
			b.Write(e.XXH3[:])
		default:
			b.WriteByte(0)
			w.entry(e)
		}
	}
	payload := b.Bytes()
	out := binary.AppendUvarint(nil, uint64(len(payload)))
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(payload, crcTable))
	if out = append(out, payload...); int64(len(out)) > limit {
		return nil
	}
	return out
}

// leastRecord is the fewest bytes a frame's record of p takes: a byte
// for each number and length, and the strings.
func leastRecord(p string, e *Entry) int64 {
	n := 2 + len(p)
	switch {
	case e == nil:
	case e.Mode&fs.ModeSymlink != 0:
		n += 7 + 2 + len(e.Target) + len(e.ContentID)
	default:
		n += 7 + 2 + len(e.SHA256) + len(e.ContentID)
		if e.XXH3 != [16]byte{} {
			n += len(e.XXH3)
		}
	}
	return int64(n)
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// replay applies the log's frames in order. A log that names another base
// is ignored; a frame that is cut short or fails its checksum ends the log
// (a torn last append); nothing in a log can make loading fail. What this
// process loaded of the same base and log before is taken as it was, and
// of a log that grew since, only the frames after it are replayed.
func (x *Index) replay(logPath state.File) error {
	was := loaded.get(x.file)
	if was != nil && (was.base != x.diskFile || !was.settled) {
		was = nil
	}
	f, err := logPath.Open()
	if errors.Is(err, fs.ErrNotExist) {
		x.keep(x.diskFile, fileID{}) // nothing to replay
		return nil
	}
	if err != nil {
		return fmt.Errorf("read index log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("read index log: %w", err)
	}
	log := fileIDOf(fi)
	if was != nil && was.log == log {
		x.resume(was, false)
		x.keep(x.diskFile, log)
		return nil
	}
	data, err := readAll(f)
	if err != nil {
		return fmt.Errorf("read index log: %w", err)
	}
	from := 0
	if was != nil && was.logOK && int64(len(data)) >= was.logValid && logSumOf(0, data[:was.logValid]) == was.logSum {
		// The log grew: the frames this process knows are as they were.
		x.resume(was, true)
		from = int(was.logValid)
	}
	if !x.replayFrom(data, from) {
		x.keep(x.diskFile, log)
		return nil // stale or damaged header: the next save starts a new log
	}
	if t := fi.ModTime().UnixNano(); t > x.ref {
		x.ref = t
	}
	x.keep(x.diskFile, log)
	return nil
}

// replayLog applies the frames of a log's bytes up to the first damage and
// records how far they reached; false when the header does not name the
// base.
func (x *Index) replayLog(data []byte) bool { return x.replayFrom(data, 0) }

// replayFrom is replayLog of the frames from byte from (0: the first,
// after the header) over an index that holds those before.
func (x *Index) replayFrom(data []byte, from int) bool {
	head := x.disk.header()
	if !bytes.HasPrefix(data, head) {
		return false
	}
	sum := x.logSum
	if from < len(head) {
		from, sum = len(head), logSumOf(0, head)
	}
	x.replaying = true
	off := readFrames(data, from, x.applyFrame)
	// What the log holds is on disk: below what the next save writes.
	for _, l := range x.added {
		x.logged.put(l.p, l.e)
	}
	x.added, x.addedBytes = nil, 0
	x.logValid, x.logOK = int64(off), true
	x.logSum = logSumOf(sum, data[from:off])
	x.replaying = false
	x.grew()
	return true
}

// readFrames passes the payload of each frame of data from off to fn, up
// to the first that is cut short, fails its checksum or fn refuses, and
// returns where the good frames end.
func readFrames(data []byte, off int, fn func(payload []byte) error) int {
	for off < len(data) {
		n, k := binary.Uvarint(data[off:])
		if k <= 0 || len(data)-off-k < 4 || n > uint64(len(data)-off-k-4) {
			break
		}
		start := off + k + 4
		payload := data[start : start+int(n)]
		if crc32.Checksum(payload, crcTable) != binary.BigEndian.Uint32(data[off+k:]) {
			break
		}
		if fn(payload) != nil {
			break
		}
		off = start + int(n)
	}
	return off
}

// streamFrames is readFrames over a reader, holding one frame at a time:
// it passes the payload of each frame to fn, up to the first that is cut
// short, fails its checksum or fn refuses.
func streamFrames(r *bufio.Reader, fn func(payload []byte) error) {
	var payload []byte
	for {
		n, err := binary.ReadUvarint(r)
		if err != nil || n > maxFrame {
			return
		}
		var sum [4]byte
		if _, err := io.ReadFull(r, sum[:]); err != nil {
			return
		}
		payload = slices.Grow(payload[:0], int(n))[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		if crc32.Checksum(payload, crcTable) != binary.BigEndian.Uint32(sum[:]) || fn(payload) != nil {
			return
		}
	}
}

// maxFrame bounds a frame streamFrames reads: a length beyond it is
// damage, not a frame to allocate for.
const maxFrame = 256 << 20

// applyFrame decodes a whole frame first, then applies it: a frame counts
// whole or not at all.
func (x *Index) applyFrame(payload []byte) error {
	recs, err := decodeFrame(payload)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.e == nil {
			x.Delete(r.p)
		} else {
			x.Set(r.p, r.e)
		}
	}
	return nil
}

// decodeFrame decodes a frame's records; a nil entry is a deletion.
func decodeFrame(payload []byte) ([]lent, error) {
	d := &indexDecoder{b: payload}
	n := d.uvarint("record count")
	if d.err == nil && n > uint64(len(payload))/2 {
		d.fail("%d records claimed in %d bytes", n, len(payload))
	}
	var recs []lent
	for i := range n {
		d.entry = i + 1
		p := d.str("path")
		if d.err != nil {
			return nil, d.err
		}
		if d.off >= len(payload) {
			d.fail("truncated in flag")
			return nil, d.err
		}
		flag := payload[d.off]
		d.off++
		var e *Entry
		switch flag {
		case 0:
			e = d.indexEntry()
		case 1:
		case 2:
			if e = d.indexEntry(); d.err == nil && e.Mode&fs.ModeSymlink == 0 && len(payload)-d.off >= len(e.XXH3) {
				d.off += copy(e.XXH3[:], payload[d.off:])
			} else if d.err == nil {
				d.fail("bad XXH3")
			}
		default:
			d.fail("bad flag %d", flag)
		}
		if d.err != nil {
			return nil, d.err
		}
		recs = append(recs, lent{p, e})
	}
	if d.off != len(payload) {
		d.fail("%d bytes of trailing data", len(payload)-d.off)
		return nil, d.err
	}
	return recs, nil
}

// encode is the index as a base file's bytes, in memory.
func (x *Index) encode() []byte {
	m := &memFile{}
	if err := x.writeBase(m); err != nil {
		panic(err) // x.n counts the live entries
	}
	return m.b
}

// writeBase writes the entries as a base to f, without marks.
func (x *Index) writeBase(f io.WriterAt) error {
	w := newBaseWriter(f, x.n)
	for it := range x.items("") {
		if it.r.flags&fDead == 0 {
			it.r.flags &^= fMarks
			w.add(&it)
		}
	}
	return cmp.Or(x.readErr(), w.finish())
}

// readErr is the first read of the base that failed: a file changed
// under it (only ever by another program: cortex-sync replaces a base by a
// rename).
func (x *Index) readErr() error {
	if x.base != nil {
		return x.base.err
	}
	return nil
}

// entryWriter writes the log's encoding of entries (an index of format 1
// wrote its entries so).
type entryWriter struct {
	b   *bytes.Buffer
	tmp [binary.MaxVarintLen64]byte
}

func (w *entryWriter) uv(v uint64) { w.b.Write(w.tmp[:binary.PutUvarint(w.tmp[:], v)]) }
func (w *entryWriter) sv(v int64)  { w.b.Write(w.tmp[:binary.PutVarint(w.tmp[:], v)]) }
func (w *entryWriter) str(s string) {
	w.uv(uint64(len(s)))
	w.b.WriteString(s)
}

// entry writes an entry's fields after its path.
func (w *entryWriter) entry(e *Entry) {
	w.uv(e.Ino)
	w.uv(uint64(e.Mode))
	w.uv(uint64(e.UID))
	w.uv(uint64(e.GID))
	w.sv(e.Size)
	w.sv(e.Mtime)
	w.sv(e.Ctime)
	if e.Mode&fs.ModeSymlink != 0 {
		w.str(e.Target)
	} else {
		w.str(e.SHA256)
	}
	w.str(e.ContentID)
}

// readAll reads f whole: its real size, never a count inside it, bounds
// what is allocated up front (as state.Dir.ReadFile does).
func readAll(f *os.File) ([]byte, error) {
	var buf bytes.Buffer
	if fi, err := f.Stat(); err == nil {
		buf.Grow(int(min(max(fi.Size(), 0), 64<<20)) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(f)
	return buf.Bytes(), err
}

// syncClose makes what was written to f durable, then closes it; f is
// closed whatever fails.
func syncClose(f *os.File) error {
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
