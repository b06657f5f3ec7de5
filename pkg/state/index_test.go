package state

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// sampleIndex has entries of a few shapes: a file, a directory, a symlink,
// negative and large numbers, empty and long strings.
func sampleIndex() *Index {
	x := NewIndex()
	x.Set("a/b.md", &IndexEntry{Stat: hostfs.Stat{Ino: 1, Size: 2, Mtime: -3, Ctime: 4, Mode: 0o644, UID: 5, GID: 6}, SHA256: "abc", ContentID: "sha256:abc"})
	x.Set("c", &IndexEntry{Stat: hostfs.Stat{Mode: os.ModeDir | 0o755}})
	x.Set("link", &IndexEntry{Stat: hostfs.Stat{Ino: 1 << 62, Mode: os.ModeSymlink | 0o777, UID: 1<<32 - 1, Mtime: 1 << 62, Ctime: -1 << 62}, Target: "../target"})
	x.Set(strings.Repeat("d/", 200)+"e", &IndexEntry{SHA256: strings.Repeat("ab", 32)})
	return x
}

// entries is an index's entries as a map, to compare.
func entries(x *Index) map[string]IndexEntry {
	out := map[string]IndexEntry{}
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
		_, err := LoadIndex(p)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrCorruptIndex) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want ErrCorruptIndex naming %s", name, err, p)
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
// ErrCorruptIndex or an index that survives a round trip, never panic or
// allocate more than the input justifies. The seed corpus under
// testdata/fuzz/FuzzDecodeIndex holds valid indexes of a few shapes,
// truncations, and the 10-byte file that once asked for 2 GB.
func FuzzDecodeIndex(f *testing.F) {
	f.Add(NewIndex().encode())
	f.Add(sampleIndex().encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := decodeIndex(data)
		if err != nil {
			if !errors.Is(err, ErrCorruptIndex) {
				t.Fatalf("error does not wrap ErrCorruptIndex: %v", err)
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

// TestIndexLog saves a small change as an append to the log, leaves the
// base alone, and loads the base with the log replayed; a torn last frame
// is cut off, a log that names another base is ignored, and a log that
// outgrows its share of the base is folded into a new base.
func TestIndexLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Directory.kb.idx")
	x := NewIndex()
	for i := range 1000 {
		x.Set(fmt.Sprintf("f%04d", i), &IndexEntry{Stat: hostfs.Stat{Ino: uint64(i), Size: 10, Mode: 0o644}, SHA256: strings.Repeat("ab", 32), ContentID: "git:1"})
	}
	if err := x.Save(p); err != nil {
		t.Fatal(err)
	}
	base, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	load := func() *Index {
		t.Helper()
		y, err := LoadIndex(p)
		if err != nil {
			t.Fatal(err)
		}
		return y
	}
	y := load()
	y.Set("f0001", &IndexEntry{Stat: hostfs.Stat{Ino: 99, Size: 11, Mode: 0o644}, SHA256: "cd", ContentID: "git:2"})
	y.Delete("f0002")
	y.Set("new", &IndexEntry{Stat: hostfs.Stat{Mode: os.ModeDir | 0o755}})
	y.Set("f0003", y.Get("f0003")) // unchanged: not written
	if err := y.Save(p); err != nil {
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
	if err := z.Save(p); err != nil {
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
		w.Set(fmt.Sprintf("f%04d", i), &IndexEntry{Stat: hostfs.Stat{Ino: uint64(i), Size: 12, Mode: 0o644}, SHA256: strings.Repeat("ef", 32), ContentID: "git:3"})
	}
	if err := w.Save(p); err != nil {
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
	x.Set("new", &IndexEntry{Stat: hostfs.Stat{Ino: 7, Mode: 0o644}, SHA256: "ef", ContentID: "git:9"})
	x.Delete("c")
	frame := x.encodeFrame()
	f.Add(frame)
	f.Add(frame[:len(frame)-1])
	f.Add(append(append([]byte{}, frame...), frame...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, tail []byte) {
		y := sampleIndex()
		y.base = baseID{ino: 1, size: 2, mtime: 3}
		head := y.base.header()
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
// against a map: the compact index must answer as the map does, through
// the added entries' folding into rows and rows deleted and set again.
func TestIndexMatchesMap(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Directory.kb.idx")
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string]IndexEntry{}
	x := NewIndex()
	ids := []string{"", "git:" + strings.Repeat("0a", 20), "sha256:" + strings.Repeat("1b", 32), "other"}
	for step := range 20000 {
		k := fmt.Sprintf("d%d/f%04d", rng.IntN(8), rng.IntN(3000))
		switch r := rng.IntN(10); {
		case r < 6:
			e := IndexEntry{Stat: hostfs.Stat{Ino: rng.Uint64(), Size: int64(rng.IntN(9)), Mode: 0o644, UID: uint32(rng.IntN(3))}, ContentID: ids[rng.IntN(len(ids))]}
			switch rng.IntN(3) {
			case 0:
				e.SHA256 = fmt.Sprintf("%064x", rng.Uint64())
				if rng.IntN(2) == 0 {
					e.ContentID = "sha256:" + e.SHA256
				}
			case 1:
				e.Mode, e.Target = fs.ModeSymlink|0o777, "t"+k
			}
			x.Set(k, &e)
			want[k] = e
		case r < 8:
			x.Delete(k)
			delete(want, k)
		case r < 9:
			x.Touch(k)
		default:
			if step%50 == 0 {
				if err := x.Save(p); err != nil {
					t.Fatal(err)
				}
				var err error
				if x, err = LoadIndex(p); err != nil {
					t.Fatal(err)
				}
			}
		}
		w, ok := want[k]
		if got := x.Get(k); (got != nil) != ok || ok && *got != w {
			t.Fatalf("step %d: Get(%s) = %+v, want %+v", step, k, got, w)
		}
	}
	if !reflect.DeepEqual(entries(x), want) {
		t.Fatal("entries differ from the map's")
	}
}

// TestIndexBytesPerEntry loads the index of a 45,000-file tree and counts
// the heap it holds: the target is flat memory, about 90 bytes an entry
// besides its path and a Git content ID.
func TestIndexBytesPerEntry(t *testing.T) {
	const n = 45000
	x := NewIndex()
	for i := range n {
		x.Set(fmt.Sprintf("src/pkg%d/file%d.go", i/40, i), &IndexEntry{
			Stat:      hostfs.Stat{Ino: uint64(i), Size: 12345, Mtime: 1 << 60, Ctime: 1 << 60, Mode: 0o644},
			SHA256:    fmt.Sprintf("%064x", i),
			ContentID: fmt.Sprintf("git:%040x", i),
		})
	}
	p := filepath.Join(t.TempDir(), "x.idx")
	if err := x.Save(p); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	y, err := LoadIndex(p)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("%d bytes an entry", per)
	// 88 for the row, about 22 for the path, 21 for the Git ID.
	if per > 150 {
		t.Errorf("a loaded index holds %d bytes an entry, want at most 150", per)
	}
	runtime.KeepAlive(y)
}
