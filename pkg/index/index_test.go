package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// sampleIndex has entries of a few shapes: a file, a directory, a symlink,
// negative and large numbers, empty and long strings.
func sampleIndex() *Index {
	x := New()
	x.Set("a/b.md", &Entry{Stat: hostfs.Stat{Ino: 1, Size: 2, Mtime: -3, Ctime: 4, Mode: 0o644, UID: 5, GID: 6}, SHA256: "abc", ContentID: "sha256:abc", XXH3: [16]byte{1, 2, 3, 15: 16}})
	x.Set("c", &Entry{Stat: hostfs.Stat{Mode: os.ModeDir | 0o755}})
	x.Set("link", &Entry{Stat: hostfs.Stat{Ino: 1 << 62, Mode: os.ModeSymlink | 0o777, UID: 1<<32 - 1, Mtime: 1 << 62, Ctime: -1 << 62}, Target: "../target"})
	x.Set(strings.Repeat("d/", 200)+"e", &Entry{SHA256: strings.Repeat("ab", 32)})
	return x
}

// entries is an index's entries as a map, to compare.
func entries(x *Index) map[string]Entry {
	out := map[string]Entry{}
	for p, e := range x.All() {
		out[p] = *e
	}
	if len(out) != x.Len() {
		panic(fmt.Sprintf("index of %d entries claims %d", len(out), x.Len()))
	}
	return out
}

func TestCorruptIndexIsAnError(t *testing.T) {
	valid := sampleIndex().encode()
	tests := map[string][]byte{
		// A 10-byte file that claims about 13 billion entries.
		"huge count":        []byte("CSIX\x01\x9a\x9a\x9a\x9a0"),
		"empty":             nil,
		"bad magic":         []byte("CSIX\x02\x00"),
		"no count":          []byte("CSIX\x01"),
		"count overflows":   []byte("CSIX\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"),
		"string past end":   []byte("CSIX\x01\x01\xff\xff\x03abc\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
		"mode out of range": []byte("CSIX\x01\x01\x01a\x00\x80\x80\x80\x80\x10\x00\x00\x00\x00\x00\x00\x00"),
		"trailing data":     append(append([]byte{}, valid...), 0),
		"duplicate path":    []byte("CSIX\x01\x02\x01a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01a\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
		"unsorted paths":    []byte("CSIX\x01\x02\x01b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01a\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
	}
	for n := range len(valid) {
		tests[fmt.Sprintf("truncated to %d bytes", n)] = valid[:n]
	}
	dir := t.TempDir()
	for name, data := range tests {
		p := filepath.Join(dir, "Directory.kb.idx")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Load(fileAt(p))
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want ErrCorrupt naming %s", name, err, p)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
			t.Errorf("%s: decoding %d bytes allocated %d", name, len(data), alloc)
		}
	}
}

func TestIndexShapesRoundTrip(t *testing.T) {
	x := sampleIndex()
	y, err := decodeIndex(x.encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(entries(x), entries(y)) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", entries(y), entries(x))
	}
}

// FuzzDecodeIndex feeds the decoder damaged indexes: it must return
// ErrCorrupt or an index that survives a round trip, never panic or
// allocate more than the input justifies. The seed corpus under
// testdata/fuzz/FuzzDecodeIndex holds valid indexes of a few shapes,
// truncations, and the 10-byte file that once asked for 2 GB.
func FuzzDecodeIndex(f *testing.F) {
	f.Add(New().encode())
	f.Add(sampleIndex().encode())
	f.Add(append([]byte("F"), sampleIndex().encode()...))
	if v2, err := os.ReadFile("testdata/index-v2.idx"); err == nil {
		f.Add(append([]byte("F"), v2...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if rest, ok := bytes.CutPrefix(data, []byte("F")); ok {
			// Inputs after an F get their checksums made right, so that
			// what the checksums guard is fuzzed too.
			data = fixSums(rest)
		}
		x, err := decodeIndex(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		y, err := decodeIndex(x.encode())
		if err != nil {
			t.Fatalf("re-encoded index does not decode: %v", err)
		}
		if !reflect.DeepEqual(entries(x), entries(y)) {
			t.Fatalf("round trip changed the entries:\n got %+v\nwant %+v", entries(y), entries(x))
		}
	})
}

// fixSums recomputes a base's checksums where its header's counts fit.
func fixSums(data []byte) []byte {
	var rl uint64
	switch {
	case len(data) < headerSize:
		return data
	case bytes.HasPrefix(data, []byte(baseMagic)):
		rl = rowSize
	case bytes.HasPrefix(data, []byte(baseMagic2)):
		rl = rowSize2
	default:
		return data
	}
	data = bytes.Clone(data)
	le := binary.LittleEndian
	n, size := le.Uint64(data[8:]), le.Uint64(data[16:])
	rest := uint64(len(data) - headerSize)
	if n <= rest/rl && size == rest-n*rl {
		le.PutUint32(data[24:], crc32.Checksum(data[headerSize:headerSize+n*rl], crcTable))
		le.PutUint32(data[28:], crc32.Checksum(data[headerSize+n*rl:], crcTable))
	}
	le.PutUint32(data[32:], crc32.Checksum(data[:32], crcTable))
	return data
}

// TestIndexLog saves a small change as an append to the log, leaves the
// base alone, and loads the base with the log replayed; a torn last frame
// is cut off, a log that names another base is ignored, and a log that
// outgrows its share of the base is folded into a new base.
func TestIndexLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Directory.kb.idx")
	x := New()
	for i := range 1000 {
		x.Set(fmt.Sprintf("f%04d", i), &Entry{Stat: hostfs.Stat{Ino: uint64(i), Size: 10, Mode: 0o644}, SHA256: strings.Repeat("ab", 32), ContentID: "git:1"})
	}
	if err := x.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	base, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	load := func() *Index {
		t.Helper()
		y, err := Load(fileAt(p))
		if err != nil {
			t.Fatal(err)
		}
		return y
	}
	y := load()
	y.Set("f0001", &Entry{Stat: hostfs.Stat{Ino: 99, Size: 11, Mode: 0o644}, SHA256: "cd", ContentID: "git:2"})
	y.Delete("f0002")
	y.Set("new", &Entry{Stat: hostfs.Stat{Mode: os.ModeDir | 0o755}})
	y.Set("f0003", y.Get("f0003")) // unchanged: not written
	if err := y.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(base.ModTime()) || after.Size() != base.Size() {
		t.Fatalf("a three-entry change rewrote the base")
	}
	logFile, err := os.Stat(p + logSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if logFile.Size() > 300 {
		t.Errorf("log of three changes is %d bytes", logFile.Size())
	}
	want := entries(y)
	z := load()
	if !reflect.DeepEqual(entries(z), want) {
		t.Fatalf("replayed index differs")
	}

	// A torn append: the log ends in half a frame.
	f, err := os.OpenFile(p+logSuffix, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0x40, 1, 2, 3, 4, 5})
	f.Close()
	z = load()
	if !reflect.DeepEqual(entries(z), want) {
		t.Fatalf("torn tail: replayed index differs")
	}
	z.Delete("f0004")
	if err := z.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	delete(want, "f0004")
	if got := load(); !reflect.DeepEqual(entries(got), want) {
		t.Fatalf("append after a torn tail: replayed index differs")
	}

	// A log of another base (a crash between a new base and the log's
	// removal) is ignored.
	stale, err := os.ReadFile(p + logSuffix)
	if err != nil {
		t.Fatal(err)
	}
	w := load()
	for i := range 1000 { // more than a quarter of the base: compacted
		w.Set(fmt.Sprintf("f%04d", i), &Entry{Stat: hostfs.Stat{Ino: uint64(i), Size: 12, Mode: 0o644}, SHA256: strings.Repeat("ef", 32), ContentID: "git:3"})
	}
	if err := w.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p + logSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("log survives compaction: %v", err)
	}
	if err := os.WriteFile(p+logSuffix, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := load(); !reflect.DeepEqual(entries(got), entries(w)) {
		t.Fatalf("a stale log was replayed: %d entries, want %d", got.Len(), w.Len())
	}
}

// FuzzIndexLog feeds replay damaged logs behind a valid header: it must
// stop at the damage, never panic, never fail the load, and apply only
// whole frames.
func FuzzIndexLog(f *testing.F) {
	x := sampleIndex()
	x.Set("new", &Entry{Stat: hostfs.Stat{Ino: 7, Mode: 0o644}, SHA256: "ef", ContentID: "git:9"})
	x.Delete("c")
	frame := encodeFrame(x.changes(), math.MaxInt64)
	f.Add(frame)
	f.Add(frame[:len(frame)-1])
	f.Add(append(append([]byte{}, frame...), frame...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, tail []byte) {
		y := sampleIndex()
		y.disk = baseID{ino: 1, size: 2, mtime: 3}
		head := y.disk.header()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if !y.replayLog(append(head, tail...)) {
			t.Fatal("a log with the base's header was refused")
		}
		runtime.ReadMemStats(&after)
		if y.logValid < int64(len(head)) || y.logValid > int64(len(head)+len(tail)) {
			t.Fatalf("valid length %d outside the log", y.logValid)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20+64*uint64(len(tail)) {
			t.Fatalf("replaying %d bytes allocated %d", len(tail), alloc)
		}
	})
}

// TestIndexMatchesMap runs random sets, touches, deletes, saves and loads
// against a map: the index must answer as the map does, through its
// layers, their checkpoints (every few entries here), the log and new
// bases.
func TestIndexMatchesMap(t *testing.T) {
	for _, every := range []int{4096, 7} {
		t.Run(fmt.Sprintf("checkpoint at %d", every), func(t *testing.T) {
			defer func(was int) { checkpointAt = was }(checkpointAt)
			checkpointAt = every
			dir := t.TempDir()
			p := filepath.Join(dir, "Directory.kb.idx")
			rng := rand.New(rand.NewPCG(1, 2))
			want, saved := map[string]Entry{}, map[string]Entry{}
			x := NewAt(fileAt(p))
			ids := []string{"", "git:" + strings.Repeat("0a", 20), "sha256:" + strings.Repeat("1b", 32), "other"}
			for step := range 20000 {
				k := fmt.Sprintf("d%d/f%03d", rng.IntN(8), rng.IntN(300))
				if rng.IntN(4) == 0 {
					k = fmt.Sprintf("d%d/s%d/f%d", rng.IntN(8), rng.IntN(3), rng.IntN(30))
				}
				switch r := rng.IntN(20); {
				case r < 12:
					e := Entry{Stat: hostfs.Stat{Ino: rng.Uint64(), Size: int64(rng.IntN(9)), Mode: 0o644, UID: uint32(rng.IntN(3))}, ContentID: ids[rng.IntN(len(ids))]}
					switch rng.IntN(3) {
					case 0:
						e.SHA256 = fmt.Sprintf("%064x", rng.Uint64())
						if rng.IntN(2) == 0 {
							e.ContentID = "sha256:" + e.SHA256
						}
						if rng.IntN(2) == 0 {
							binary.LittleEndian.PutUint64(e.XXH3[3:], rng.Uint64())
						}
					case 1:
						e.Mode, e.Target = fs.ModeSymlink|0o777, "t"+k
					}
					x.Set(k, &e)
					want[k] = e
				case r < 16:
					x.Delete(k)
					delete(want, k)
				case r < 17:
					deleteBelow(x, want, k[:strings.IndexByte(k, '/')])
				case r < 18:
					x.Touch(k)
				case r < 19:
					checkChildren(t, step, x, want, k[:strings.IndexByte(k, '/')])
				default:
					if step%20 == 0 {
						if err := x.Save(fileAt(p)); err != nil {
							t.Fatal(err)
						}
						if x.Dirty() {
							t.Fatalf("step %d: dirty after a save", step)
						}
						saved = maps.Clone(want)
						var err error
						if x, err = Load(fileAt(p)); err != nil {
							t.Fatal(err)
						}
					}
				}
				checkGet(t, step, x, want, k)
				if step%10 == 0 && !x.Dirty() && !maps.Equal(want, saved) {
					t.Fatalf("step %d: changed since the last save, but not dirty", step)
				}
			}
			if !reflect.DeepEqual(entries(x), want) {
				t.Fatal("entries differ from the map's")
			}
			checkChildren(t, -1, x, want, "")
			if left := beside(dir); len(left) > 2 {
				t.Errorf("files beside the index and the note of its check: %v", left)
			}
		})
	}
}

// deleteBelow deletes what is below d from the index and from the map.
func deleteBelow(x *Index, want map[string]Entry, d string) {
	x.DeleteBelow(d)
	for w := range want {
		if strings.HasPrefix(w, d+"/") {
			delete(want, w)
		}
	}
}

// checkGet compares Get(k) and Len with what the map holds.
func checkGet(t *testing.T, step int, x *Index, want map[string]Entry, k string) {
	t.Helper()
	w, ok := want[k]
	if got := x.Get(k); (got != nil) != ok || ok && *got != w {
		t.Fatalf("step %d: Get(%q) = %+v, want %+v", step, k, got, w)
	}
	if x.Len() != len(want) {
		t.Fatalf("step %d: Len() = %d, want %d", step, x.Len(), len(want))
	}
}

// checkChildren compares Children(dir) with what the map holds.
func checkChildren(t *testing.T, step int, x *Index, want map[string]Entry, dir string) {
	t.Helper()
	exp := map[string]Child{}
	prefix := dir + "/"
	if dir == "" {
		prefix = ""
	}
	for p, e := range want {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		if name, _, below := strings.Cut(rest, "/"); below {
			c := exp[name]
			c.Below = true
			exp[name] = c
		} else {
			c := exp[name]
			c.Entry = &e
			exp[name] = c
		}
	}
	got := x.Children(dir)
	if len(got) != len(exp) {
		t.Fatalf("step %d: Children(%q) has %d names, want %d", step, dir, len(got), len(exp))
	}
	for name, c := range exp {
		g, ok := got[name]
		if !ok || g.Below != c.Below || (g.Entry == nil) != (c.Entry == nil) || g.Entry != nil && *g.Entry != *c.Entry {
			t.Fatalf("step %d: Children(%q)[%s] = %+v, want %+v", step, dir, name, g, c)
		}
	}
}

// TestIndexBytesPerEntry loads the index of a 45,000-file tree and counts
// the heap it holds: it is read in place, so its block cache and nothing
// per entry.
func TestIndexBytesPerEntry(t *testing.T) {
	const n = 45000
	x := New()
	for i := range n {
		x.Set(fmt.Sprintf("src/pkg%d/file%d.go", i/40, i), &Entry{
			Stat:      hostfs.Stat{Ino: uint64(i), Size: 12345, Mtime: 1 << 60, Ctime: 1 << 60, Mode: 0o644},
			SHA256:    fmt.Sprintf("%064x", i),
			ContentID: fmt.Sprintf("git:%040x", i),
		})
	}
	p := filepath.Join(t.TempDir(), "x.idx")
	if err := x.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	x = nil
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	y, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	if y.Get("src/pkg3/file150.go") == nil || y.Len() != n {
		t.Fatalf("loaded index: %d entries", y.Len())
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("a loaded index of %d entries holds %d KiB", n, held>>10)
	if limit := int64(cacheBlocks*blockSize + 64<<10); held > limit {
		t.Errorf("a loaded index holds %d bytes on the heap, want its block cache (%d) and no more", held, cacheBlocks*blockSize)
	}
	runtime.KeepAlive(y)
}

// TestIndexConvergedLookups: what a converged check asks of a loaded
// index for each unchanged file, setting the entry it found again, costs
// no allocation and leaves nothing to save; a look-up makes the entry and
// its two strings, nothing more. (A count of allocations, not of time: it
// is the same on any machine.)
func TestIndexConvergedLookups(t *testing.T) {
	x := New()
	kinds := []*Entry{
		{Stat: hostfs.Stat{Ino: 1, Size: 5, Mtime: 7, Ctime: 8, Mode: 0o644}, SHA256: fmt.Sprintf("%064x", 1), ContentID: fmt.Sprintf("git:%040x", 2)},
		{Stat: hostfs.Stat{Ino: 2, Size: 5, Mode: 0o644}, SHA256: fmt.Sprintf("%064x", 3), ContentID: "sha256:" + fmt.Sprintf("%064x", 3)},
		{Stat: hostfs.Stat{Ino: 3, Mode: fs.ModeSymlink | 0o777}, Target: "../elsewhere", ContentID: fmt.Sprintf("git:%040x", 4)},
		{Stat: hostfs.Stat{Ino: 4, Mode: fs.ModeDir | 0o755}},
		{Stat: hostfs.Stat{Ino: 5, Size: 1, Mode: 0o600}, SHA256: "not hex", ContentID: "other:id"},
	}
	const n = 5000
	for i := range n {
		e := *kinds[i%len(kinds)]
		e.Ino = uint64(i)
		x.Set(fmt.Sprintf("src/pkg%d/file%d", i/40, i), &e)
	}
	y := reloaded(t, x, filepath.Join(t.TempDir(), "x.idx"))
	for i := range len(kinds) {
		path := fmt.Sprintf("src/pkg%d/file%d", i/40, i)
		e := y.Get(path)
		want := *kinds[i]
		want.Ino = uint64(i)
		if e == nil || *e != want {
			t.Fatalf("Get(%s) = %+v, want %+v", path, e, want)
		}
		if allocs := testing.AllocsPerRun(20, func() { y.Set(path, e) }); allocs != 0 {
			t.Errorf("setting %s's entry as it is: %.0f allocations, want none", path, allocs)
		}
		if allocs := testing.AllocsPerRun(20, func() { y.Get(path) }); allocs > 3 {
			t.Errorf("Get(%s): %.0f allocations, want the entry and its strings (3 at most)", path, allocs)
		}
	}
	if y.Dirty() {
		t.Error("entries set as they were: the index is dirty")
	}
	// The 40 entries of a directory, or 5,000 of one: the allocations of
	// ChildrenOf do not grow with the entries (a Kids used again).
	var k Kids
	few := testing.AllocsPerRun(5, func() { y.ChildrenOf("src/pkg0", &k) })
	if few > 2 {
		t.Errorf("ChildrenOf: %.0f allocations for 40 entries, want the cursor and the strings (2)", few)
	}
	big := New()
	for i := range n {
		big.Set(fmt.Sprintf("dir/file%d", i), kinds[i%len(kinds)])
	}
	big = reloaded(t, big, filepath.Join(t.TempDir(), "big.idx"))
	if kids := big.Children("dir"); len(kids) != n || *kids["file2"].Entry != *kinds[2] {
		t.Fatalf("Children: %d names, file2 %+v", len(kids), kids["file2"].Entry)
	}
	if c, ok := k.Find("file0"); !ok || c.Entry == nil || len(k.Names) != 40 {
		t.Fatalf("ChildrenOf(src/pkg0): %d names, file0 %+v", len(k.Names), c)
	}
	if many := testing.AllocsPerRun(5, func() { big.ChildrenOf("dir", &k) }); many > few {
		t.Errorf("ChildrenOf: %.0f allocations for %d entries, %.0f for 40", many, n, few)
	}
	changed := *y.Get("src/pkg0/file0")
	changed.Size++
	y.Set("src/pkg0/file0", &changed)
	if !y.Dirty() || y.Get("src/pkg0/file0").Size != changed.Size {
		t.Error("an entry set anew was not recorded")
	}
}

// encodeV1 is x in the index format 1, which cortex-sync wrote before
// format 2.
func encodeV1(x *Index) []byte {
	var b bytes.Buffer
	b.WriteString(indexMagic)
	w := entryWriter{b: &b}
	w.uv(uint64(x.Len()))
	for p, e := range x.All() {
		w.str(p)
		w.entry(e)
	}
	return b.Bytes()
}

// writeFormat1WithLog writes sampleIndex at p in format 1, and a log
// beside it that sets "new" and deletes "c"; it returns the entries both
// make.
func writeFormat1WithLog(t *testing.T, p string) map[string]Entry {
	t.Helper()
	if err := os.WriteFile(p, encodeV1(sampleIndex()), 0o600); err != nil {
		t.Fatal(err)
	}
	y, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	y.Set("new", &Entry{Stat: hostfs.Stat{Ino: 7, Mode: 0o644}, SHA256: "ef", ContentID: "git:9"})
	y.Delete("c")
	if err := y.appendLog(fileAt(p+logSuffix), encodeFrame(y.changes(), math.MaxInt64)); err != nil {
		t.Fatal(err)
	}
	return entries(y)
}

// TestIndexOfFormat1 loads an index written in format 1 with a log beside
// it: the entries are as they were, and the next save writes format 2.
func TestIndexOfFormat1(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Directory.kb.idx")
	want := writeFormat1WithLog(t, p)
	z, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(entries(z), want) {
		t.Fatalf("format 1 and its log:\n got %+v\nwant %+v", entries(z), want)
	}
	if !z.Dirty() {
		t.Error("an index of format 1 is not dirty: it would never be rewritten")
	}
	// ...and the next save writes format 2, the log gone.
	if err := z.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte(baseMagic)) {
		t.Fatalf("saved as %q", data[:5])
	}
	if _, err := os.Stat(p + logSuffix); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the log outlived the rewrite: %v", err)
	}
	if got, err := Load(fileAt(p)); err != nil || !reflect.DeepEqual(entries(got), want) || got.Dirty() {
		t.Fatalf("format 2: %v, %+v", err, got)
	}
}

// An index of format 2 (written before XXH3 was recorded) is read as it
// is, and so is a log an older cortex-sync appended to it. The first
// save writes the base whole, in format 3, rather than log an XXH3 over
// it: an older cortex-sync would take that frame for a torn end, cut the
// log there and forget what it wrote; it refuses the new base by name.
func TestIndexOfFormat2(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "Directory.kb.idx")
	old, err := os.ReadFile("testdata/index-v2.idx")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, old, 0o600); err != nil {
		t.Fatal(err)
	}
	x, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Entry{
		"a/file.md": {Stat: hostfs.Stat{Ino: 7, Size: 5, Mtime: 1700000000000000000, Ctime: 1700000000000000001, Mode: 0o644, UID: 1000, GID: 1000}, SHA256: strings.Repeat("ab", 32), ContentID: "git:" + strings.Repeat("cd", 20)},
		"a/link":    {Stat: hostfs.Stat{Ino: 8, Size: 4, Mtime: 1700000000000000000, Ctime: 1700000000000000000, Mode: fs.ModeSymlink | 0o777}, Target: "file.md"},
		"a":         {Stat: hostfs.Stat{Ino: 9, Mode: fs.ModeDir | 0o755}, ContentID: "names:0123"},
		"b.txt":     {Stat: hostfs.Stat{Ino: 10, Size: 3, Mode: 0o644}, SHA256: strings.Repeat("ef", 32), ContentID: "sha256:" + strings.Repeat("ef", 32)},
	}
	if got := entries(x); !reflect.DeepEqual(got, want) {
		t.Fatalf("format 2:\n got %+v\nwant %+v", got, want)
	}
	// A log as an older cortex-sync appends it (no XXH3: flag 0).
	logged := Entry{Stat: hostfs.Stat{Ino: 11, Size: 2, Mode: 0o644}, SHA256: strings.Repeat("12", 32)}
	if err := x.appendLog(fileAt(p).With(logSuffix), encodeFrame(maps.All(map[string]*Entry{"c.md": &logged}), 1<<20)); err != nil {
		t.Fatal(err)
	}
	want["c.md"] = logged
	y, err := Load(fileAt(p))
	if err != nil || !reflect.DeepEqual(entries(y), want) {
		t.Fatalf("format 2 and an older log: %v\n got %+v\nwant %+v", err, entries(y), want)
	}
	e := want["a/file.md"]
	e.XXH3 = [16]byte{0xfe, 15: 0x01}
	y.Set("a/file.md", &e)
	want["a/file.md"] = e
	if err := y.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(p); !bytes.HasPrefix(data, []byte("CSIX\x03")) {
		t.Fatalf("saved as %q: a base of format 2 is written whole at its first save", data[:5])
	}
	if _, err := os.Stat(p + logSuffix); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the log outlived the rewrite: %v", err)
	}
	z, err := Load(fileAt(p))
	if err != nil || !reflect.DeepEqual(entries(z), want) {
		t.Fatalf("format 3: %v\n got %+v\nwant %+v", err, entries(z), want)
	}
	// From here on, small changes go to the log again.
	e.Size = 6
	z.Set("a/file.md", &e)
	want["a/file.md"] = e
	before, _ := os.ReadFile(p)
	if err := z.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
		t.Error("a base of format 3 was rewritten for one entry: the log should hold it")
	}
	if got, err := Load(fileAt(p)); err != nil || !reflect.DeepEqual(entries(got), want) {
		t.Fatalf("format 3 and its log: %v\n got %+v\nwant %+v", err, entries(got), want)
	}
}

// A symlink's content is its target: an XXH3 set on one is not kept, so
// that it reads the same before a save and after.
func TestIndexSymlinkKeepsNoXXH3(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.idx")
	x := NewAt(fileAt(p))
	x.Set("l", &Entry{Stat: hostfs.Stat{Mode: fs.ModeSymlink | 0o777}, Target: "t", XXH3: [16]byte{1}})
	if e := x.Get("l"); e.XXH3 != [16]byte{} {
		t.Fatalf("set: %+v", e)
	}
	if err := x.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	y, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	y.Set("l", &Entry{Stat: hostfs.Stat{Mode: fs.ModeSymlink | 0o777}, Target: "t", XXH3: [16]byte{1}})
	if y.Dirty() {
		t.Error("setting a symlink as it is recorded, but for an XXH3, changed the index")
	}
}

// TestIndexWrittenWholeStaysFlat sets the entries of a 45,000-file tree
// and of one four times larger into an empty index, as a first sync does:
// the added layer is written out as runs beside the index once it holds
// layerBytes, so the heap holds the same few MiB at either size.
func TestIndexWrittenWholeStaysFlat(t *testing.T) {
	for _, n := range []int{45000, 180000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { writtenWholeStaysFlat(t, n) })
	}
}

func writtenWholeStaysFlat(t *testing.T, n int) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.idx")
	x := NewAt(fileAt(p))
	var before, ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	peak := int64(0)
	for i := range n {
		x.Set(fmt.Sprintf("src/pkg%d/file%d.go", i/40, i), &Entry{
			Stat:      hostfs.Stat{Ino: uint64(i), Size: 12345, Mtime: 1 << 60, Ctime: 1 << 60, Mode: 0o644},
			SHA256:    fmt.Sprintf("%064x", i),
			ContentID: fmt.Sprintf("git:%040x", i),
		})
		if i%1000 == 999 {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			peak = max(peak, int64(ms.HeapAlloc)-int64(before.HeapAlloc))
		}
	}
	t.Logf("heap peak %.1f MB for %d entries, %d runs", float64(peak)/1e6, n, len(x.runs))
	if limit := int64(layerBytes) + 2<<20; peak > limit {
		t.Errorf("heap peak %d bytes while writing %d entries, want at most %d", peak, n, limit)
	}
	if err := x.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	if x.Len() != n || x.Get("src/pkg0/file0.go") == nil {
		t.Fatalf("saved index: %d entries", x.Len())
	}
	if left := beside(dir); len(left) != 1 {
		t.Errorf("files beside the index: %v", left)
	}
}

// TestIndexDamagedAfterLoad: a base checked whole once is not checked
// again while it stays the same file, but a byte changed in place after
// that is found all the same.
func TestIndexDamagedAfterLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Directory.kb.idx")
	if err := sampleIndex().Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * racyMargin) // old enough to be remembered
	for range 2 {
		if _, err := Load(fileAt(p)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, headerSize+3); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// Both just after the damage and once it is old.
	for _, wait := range []time.Duration{0, 2 * racyMargin} {
		time.Sleep(wait)
		if _, err := Load(fileAt(p)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("index damaged in place, %v after: err = %v, want ErrCorrupt", wait, err)
		}
	}
}

// Children is what ChildrenOf lists, by name: the tests' view of it.
func (x *Index) Children(dir string) map[string]Child {
	var k Kids
	x.ChildrenOf(dir, &k)
	out := make(map[string]Child, len(k.Names))
	for i, name := range k.Names {
		out[name] = k.Of[i]
	}
	return out
}

func TestIndexRoundTrip(t *testing.T) {
	x := New()
	x.Set("a/b.md", &Entry{Stat: hostfs.Stat{Ino: 1, Size: 2, Mtime: -3, Ctime: 4, Mode: 0o644, UID: 5, GID: 6}, SHA256: "abc", ContentID: "sha256:abc"})
	x.Set("c", &Entry{Stat: hostfs.Stat{Mode: os.ModeDir | 0o755}})
	p := filepath.Join(t.TempDir(), "trees", "x.idx")
	if err := x.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	y, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	if y.Len() != 2 || *y.Get("a/b.md") != *x.Get("a/b.md") || *y.Get("c") != *x.Get("c") {
		t.Fatalf("round trip: %+v", entries(y))
	}
	// Entries as new as the index are racily clean; older ones are not.
	old := &Entry{Stat: hostfs.Stat{Mtime: y.ref - 1e9, Ctime: y.ref - 1e9}}
	fresh := &Entry{Stat: hostfs.Stat{Mtime: y.ref - 1e9, Ctime: y.ref}}
	if y.Racy(old.Stat) || !y.Racy(fresh.Stat) {
		t.Fatalf("racy: old %v fresh %v", y.Racy(old.Stat), y.Racy(fresh.Stat))
	}
	os.WriteFile(p, []byte("CSIX\x01\xff"), 0o600)
	if _, err := Load(fileAt(p)); err == nil {
		t.Fatal("a truncated index loaded without error")
	}
}

// fileAt is the file at the host path p, in a state dir that is its
// directory.
func fileAt(p string) state.File { return state.At(filepath.Dir(p)).File(filepath.Base(p)) }

// deadPID is the pid of a process that has ended and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// saved is a state dir holding a snapshot with one entry.
func saved(t *testing.T) state.Dir {
	t.Helper()
	d := state.At(filepath.Join(t.TempDir(), "state"))
	s, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	s.Put(&state.Entry{ID: "File/a", Kind: "File", Path: "/a", Created: true})
	if err := d.Save(s); err != nil {
		t.Fatal(err)
	}
	return d
}
