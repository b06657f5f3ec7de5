package index

import (
	"hash/crc32"
	"io/fs"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// What a load of an index read from its log is kept in this process,
// beside the files it came from: the agent loads a tree's index at every
// event, and replaying a log of a few thousand frames cost it more than
// the event. A load whose base and log are the very files of the last
// load or save takes the entries the log held as they were, without
// reading it; one whose log grew (another cortex-sync appended to it: a
// sync by hand) reads it and replays only the frames after those it
// knows, once the bytes it knows are found unchanged; anything else (a new
// base, a log started anew or changed in place) loads afresh. The base
// itself is opened and checked as ever (parseBase): only the log is
// skipped.
//
// A file is known by its device, inode, size, mtime and ctime. A base is
// known so only once it is older than racyMargin (as parseBase has it): a
// base replaced in the very tick of the clock that stamped the last one
// may look the same. Every writer of a log appends (its size grows) or
// writes a new file (a new inode): only a program other than cortex-sync
// that changes a log in place, keeping its size, within one tick goes
// unseen; its damage would only have cut the log short.

// fileID names one version of a file.
type fileID struct {
	dev, ino           uint64
	size, mtime, ctime int64
}

func fileIDOf(fi fs.FileInfo) fileID {
	id := fileID{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino, id.ctime = uint64(st.Dev), st.Ino, ctimeOf(st)
	}
	return id
}

// loadedIndex is an index as its base and log on disk make it.
type loadedIndex struct {
	base, log fileID // log: the zero fileID when there was none
	settled   bool   // base is older than racyMargin: its fileID names it for good
	logged    layer  // never changed once kept: an index takes a copy to change
	n         int
	ref       int64
	logValid  int64
	logOK     bool
	logSum    uint32 // the CRC-32C of the log's first logValid bytes
}

// loaded are the indexes loaded last, by file.
var loaded = loadedIndexes{m: map[state.File]*loadedIndex{}}

// maxLoaded bounds the indexes kept: a state dir has one a tree, and a
// source stat cache.
const maxLoaded = 256

type loadedIndexes struct {
	mu sync.Mutex
	m  map[state.File]*loadedIndex
}

func (c *loadedIndexes) get(f state.File) *loadedIndex {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[f]
}

func (c *loadedIndexes) put(f state.File, l *loadedIndex) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxLoaded {
		clear(c.m)
	}
	c.m[f] = l
}

func (c *loadedIndexes) forget(f state.File) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, f)
}

// resume takes l's view of the log; to replay more frames into it, the
// layer is copied (another index may be reading it).
func (x *Index) resume(l *loadedIndex, more bool) {
	x.logged = slices.Clip(l.logged)
	if more {
		x.logged = slices.Clone(l.logged)
	}
	x.n, x.ref, x.logValid, x.logOK, x.logSum = l.n, l.ref, l.logValid, l.logOK, l.logSum
}

// keep remembers x as loaded or saved, from the base named base and the
// log named log; an index that holds more than its files say (a
// checkpoint, or a base to be rewritten) is not kept.
func (x *Index) keep(base, log fileID) {
	if x.rewrite || x.spilled() || len(x.added) > 0 {
		loaded.forget(x.file)
		return
	}
	loaded.put(x.file, &loadedIndex{
		base: base, log: log, settled: settled(base), logged: slices.Clip(x.logged),
		n: x.n, ref: x.ref, logValid: x.logValid, logOK: x.logOK, logSum: x.logSum,
	})
}

// appended remembers x's log as its append of frame left it: what was
// added is on disk now, below what the next save writes.
func (x *Index) appended(log fileID) {
	if x.spilled() {
		loaded.forget(x.file) // what was logged went into the checkpoint, or is in runs
		return
	}
	logged := make(layer, 0, len(x.logged)+len(x.added))
	i, j := 0, 0
	for i < len(x.logged) || j < len(x.added) {
		switch {
		case j == len(x.added) || i < len(x.logged) && x.logged[i].p < x.added[j].p:
			logged = append(logged, x.logged[i])
			i++
		case i == len(x.logged) || x.added[j].p < x.logged[i].p:
			logged = append(logged, x.added[j])
			j++
		default: // the same path: the newer entry
			logged = append(logged, x.added[j])
			i, j = i+1, j+1
		}
	}
	loaded.put(x.file, &loadedIndex{
		base: x.diskFile, log: log, settled: settled(x.diskFile), logged: logged,
		n: x.n, ref: max(x.disk.mtime, log.mtime), logValid: x.logValid, logOK: true, logSum: x.logSum,
	})
}

// settled reports whether a base last changed long enough ago for its
// fileID to tell any later change.
func settled(base fileID) bool {
	return time.Since(time.Unix(0, base.ctime)) >= racyMargin
}

// logSumOf is the CRC-32C of a log's bytes.
func logSumOf(sum uint32, data []byte) uint32 { return crc32.Update(sum, crcTable, data) }
