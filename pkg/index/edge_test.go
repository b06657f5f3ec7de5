package index

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// oddPaths sort around '/' and each other: a name and the names that
// share its prefix with a byte below or above '/', NUL, bytes that are not
// UTF-8, the empty path, doubled and leading slashes, and a long path.
var oddPaths = []string{
	"", "a", "a-", "a-/x", "a.b", "a.b/c", "a/b", "a/b/c", "a/b.c", "a/b/", "a//b",
	"a0", "a\x00", "a\x00/b", "a/\xff", "\xff", "\xff/\xfe", "/a", "/", "b", "a/b/c/d",
	strings.Repeat("x/", 3000) + "y", strings.Repeat("x/", 3000) + "y0",
}

// TestIndexMatchesMapOddPaths is TestIndexMatchesMap over oddPaths, with a
// checkpoint every few entries, and with checkpoints that fail (a state
// dir that cannot be written): the layers then stay in memory, and the
// index must answer all the same.
func TestIndexMatchesMapOddPaths(t *testing.T) {
	for _, spill := range []string{"ok", "fails"} {
		t.Run("checkpoints "+spill, func(t *testing.T) {
			defer func(was int) { checkpointAt = was }(checkpointAt)
			checkpointAt = 3
			dir := t.TempDir()
			p := filepath.Join(dir, "Directory.kb.idx")
			blocked := filepath.Join(dir, "file")
			if err := os.WriteFile(blocked, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			fix := func(x *Index) {
				if spill == "fails" {
					x.spill = state.At(dir).Sub("file/sub") // below a file: making it fails
				}
			}
			rng := rand.New(rand.NewPCG(3, 4))
			want := map[string]Entry{}
			x := NewAt(fileAt(p))
			fix(x)
			dirs := []string{"", "a", "a/b", "a.b", "a\x00", "\xff", "x", strings.Repeat("x/", 2999) + "x"}
			for step := range 3000 {
				k := oddPaths[rng.IntN(len(oddPaths))]
				switch r := rng.IntN(20); {
				case r < 10:
					e := Entry{Stat: hostfs.Stat{Ino: rng.Uint64(), Size: int64(rng.IntN(9)), Mode: 0o644}, SHA256: fmt.Sprintf("%064x", rng.Uint64()), ContentID: "git:" + strings.Repeat("0a", 20)}
					x.Set(k, &e)
					want[k] = e
				case r < 14:
					x.Delete(k)
					delete(want, k)
				case r < 15:
					deleteBelow(x, want, dirs[rng.IntN(len(dirs))])
				case r < 16:
					x.Touch(k)
				case r < 18:
					checkChildren(t, step, x, want, dirs[rng.IntN(len(dirs))])
				default:
					if err := x.Save(fileAt(p)); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					var err error
					if x, err = Load(fileAt(p)); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					fix(x)
				}
				checkGet(t, step, x, want, k)
			}
			if !reflect.DeepEqual(entries(x), want) {
				t.Fatal("entries differ from the map's")
			}
			if err := x.Save(fileAt(p)); err != nil {
				t.Fatal(err)
			}
			y, err := Load(fileAt(p))
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(entries(y), want) {
				t.Fatal("saved entries differ from the map's")
			}
		})
	}
}

// TestIndexBitFlips flips a bit of every byte of a saved base, one at a
// time: each load refuses with ErrCorrupt naming the file, and never
// panics.
func TestIndexBitFlips(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Directory.kb.idx")
	if err := sampleIndex().Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(good) {
		bad := append([]byte(nil), good...)
		bad[i] ^= 1 << (i % 8)
		if err := os.WriteFile(p, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(fileAt(p))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
			t.Fatalf("bit %d of byte %d flipped: err = %v, want ErrCorrupt naming %s", i%8, i, err, p)
		}
	}
}

// TestIndexBaseReplacedWhileMapped renames another base over the one an
// index reads in place: the index keeps reading what it loaded.
func TestIndexBaseReplacedWhileMapped(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "Directory.kb.idx")
	if err := sampleIndex().Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	x, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	want := entries(sampleIndex())
	other := New()
	other.Set("z", &Entry{SHA256: "00"})
	if err := other.Save(fileAt(filepath.Join(dir, "other.idx"))); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "other.idx"), p); err != nil {
		t.Fatal(err)
	}
	if got := entries(x); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the rename: %+v, want %+v", got, want)
	}
}

// readOnly makes dir refuse new files for the rest of the test: by its
// mode, or for root (whom modes do not stop) with chattr +i.
func readOnly(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o700) })
		return
	}
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		t.Skipf("root, and chattr +i fails: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", dir).Run() })
	if f, err := os.CreateTemp(dir, "probe"); err == nil {
		f.Close()
		os.Remove(f.Name())
		t.Skip("chattr +i did not make the directory read-only")
	}
}

// TestIndexOfFormat1InReadOnlyDir loads an index of format 1 (and its log)
// from a state dir its reader cannot write, as a diff by another user
// does: the conversion has nowhere to go on disk, and is made in memory;
// checkpoints fail, and the layers stay in memory.
func TestIndexOfFormat1InReadOnlyDir(t *testing.T) {
	defer func(was int) { checkpointAt = was }(checkpointAt)
	checkpointAt = 8
	dir := t.TempDir()
	p := filepath.Join(dir, "Directory.kb.idx")
	want := writeFormat1WithLog(t, p)
	readOnly(t, dir)
	z, err := Load(fileAt(p))
	if err != nil {
		t.Fatalf("format 1 in a read-only dir: %v", err)
	}
	if !reflect.DeepEqual(entries(z), want) {
		t.Fatalf("format 1 in a read-only dir:\n got %+v\nwant %+v", entries(z), want)
	}
	for i := range 100 {
		e := Entry{Stat: hostfs.Stat{Ino: uint64(i)}, SHA256: fmt.Sprintf("%064x", i)}
		k := fmt.Sprintf("d/f%03d", i)
		z.Set(k, &e)
		want[k] = e
	}
	z.Delete("link")
	delete(want, "link")
	if !reflect.DeepEqual(entries(z), want) {
		t.Fatal("after checkpoints that failed, entries differ")
	}
}

// smallDisk is a directory on a filesystem of size bytes, and a function
// that fills what is left of it.
func smallDisk(t *testing.T, size int) (string, func()) {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		// An index's mappings go once the collector finds it unreachable.
		for deadline := time.Now().Add(10 * time.Second); ; {
			runtime.GC()
			out, err := exec.Command("umount", dir).CombinedOutput()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("umount %s: %v %s", dir, err, out)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	fill := func() {
		f, err := os.Create(filepath.Join(dir, "filler"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 4096)
		for {
			if _, err := f.Write(buf); err != nil {
				return
			}
		}
	}
	return dir, fill
}

// TestIndexOnFullDisk loads an index of format 1 from a full disk (the
// conversion is held in memory), sets more than a checkpoint holds (the
// checkpoints fail; the layers stay in memory), fails to save, and saves
// once there is room again: nothing is lost or torn along the way.
func TestIndexOnFullDisk(t *testing.T) {
	defer func(was int) { checkpointAt = was }(checkpointAt)
	checkpointAt = 16
	dir, fill := smallDisk(t, 256<<10)
	p := filepath.Join(dir, "Directory.kb.idx")
	x := New()
	for i := range 500 {
		x.Set(fmt.Sprintf("d/f%04d", i), &Entry{Stat: hostfs.Stat{Ino: uint64(i)}, SHA256: fmt.Sprintf("%064x", i)})
	}
	if err := os.WriteFile(p, encodeV1(x), 0o600); err != nil {
		t.Fatal(err)
	}
	want := entries(x)
	fill()
	y, err := Load(fileAt(p))
	if err != nil {
		t.Fatalf("format 1 on a full disk: %v", err)
	}
	for i := range 300 {
		e := Entry{Stat: hostfs.Stat{Ino: uint64(i)}, SHA256: "new"}
		k := fmt.Sprintf("e/f%04d", i)
		y.Set(k, &e)
		want[k] = e
		y.Delete(fmt.Sprintf("d/f%04d", i))
		delete(want, fmt.Sprintf("d/f%04d", i))
	}
	if !reflect.DeepEqual(entries(y), want) {
		t.Fatal("on a full disk, entries differ")
	}
	if err := y.Save(fileAt(p)); err == nil {
		t.Fatal("saved to a full disk")
	}
	if !reflect.DeepEqual(entries(y), want) {
		t.Fatal("after a failed save, entries differ")
	}
	if z, err := Load(fileAt(p)); err != nil || !reflect.DeepEqual(entries(z), entries(x)) {
		t.Fatalf("after a failed save, the index on disk is not as it was: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	if err := y.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	if z, err := Load(fileAt(p)); err != nil || !reflect.DeepEqual(entries(z), want) {
		t.Fatalf("saved once there was room: %v", err)
	}
	if left := beside(dir); len(left) != 1 {
		t.Errorf("files beside the index: %v", left)
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestIndexReadsInBoundedMemory checks a converged 45,000-file tree
// against its index as a diff does (directory by directory: its children,
// then each file looked up and set as it stands; then four directories at
// once, as parallel comparisons interleave them; then look-ups in no order
// at all): what the walks hold is the block cache, far below the index's
// size, and nothing of the file is mapped. The index is written in one go
// (which gives the page cache 2 MiB folios on Linux 6.18 and ext4: a
// mapping of it became resident whole within a few look-ups).
func TestIndexReadsInBoundedMemory(t *testing.T) {
	const n, perDir = 45000, 40
	dir := t.TempDir()
	p := filepath.Join(dir, "x.idx")
	x := NewAt(fileAt(p))
	path := func(i int) string { return fmt.Sprintf("src/pkg%d/file%d.go", i/perDir, i) }
	entry := func(i int) *Entry {
		return &Entry{
			Stat:      hostfs.Stat{Ino: uint64(i), Size: 12345, Mtime: 1, Ctime: 1, Mode: 0o644},
			SHA256:    fmt.Sprintf("%064x", i),
			ContentID: fmt.Sprintf("git:%040x", i),
		}
	}
	for i := range n {
		x.Set(path(i), entry(i))
	}
	for d := range n / perDir {
		x.Set(fmt.Sprintf("src/pkg%d", d), &Entry{Stat: hostfs.Stat{Ino: uint64(d), Mtime: 1, Ctime: 1, Mode: fs.ModeDir | 0o755}})
	}
	if err := os.WriteFile(p, x.encode(), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	x = nil
	before := heapInUse()
	y, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	peak := int64(0)
	for d := range n / perDir {
		dp := fmt.Sprintf("src/pkg%d", d)
		if y.Get(dp) == nil {
			t.Fatalf("%s not in the index", dp)
		}
		kids := y.Children(dp)
		for i := d * perDir; i < (d+1)*perDir; i++ {
			name := path(i)
			if kids[filepath.Base(name)].Entry == nil {
				t.Fatalf("%s not among the children of %s", name, dp)
			}
			if e := y.Get(name); e == nil || y.Racy(e.Stat) {
				t.Fatalf("%s: %+v", name, e)
			}
			y.Set(name, entry(i))
		}
		if d%100 == 0 {
			peak = max(peak, heapInUse()-before)
		}
	}
	if y.Dirty() {
		t.Error("a converged diff made the index dirty")
	}
	const ways = 4
	for d := 0; d < n/perDir; d += ways {
		for i := range perDir {
			for w := range min(ways, n/perDir-d) {
				k := (d+w)*perDir + i
				y.Set(path(k), entry(k))
			}
		}
		if d%100 == 0 {
			peak = max(peak, heapInUse()-before)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for k := range n {
		if y.Get(path(rng.IntN(n))) == nil {
			t.Fatal("a file not in the index")
		}
		if k%5000 == 0 {
			peak = max(peak, heapInUse()-before)
		}
	}
	t.Logf("index of %d bytes; the walks held at most %d KiB of heap", fi.Size(), peak>>10)
	if limit := int64(cacheBlocks*blockSize + 256<<10); peak > limit {
		t.Errorf("the walks held %d bytes, want at most %d (the index is %d bytes)", peak, limit, fi.Size())
	}
	if smaps, err := os.ReadFile("/proc/self/smaps"); err == nil && strings.Contains(string(smaps), p) {
		t.Errorf("%s is mapped", p)
	}
	runtime.KeepAlive(y)
}

// TestIndexStaleLogOfFormat1 upgrades an index of format 1 with a log, and
// puts the log back, as a kill between the new base's rename and the log's
// removal leaves it: the log names the old base, and is not replayed over
// the new one, nor does it stop the next save's append.
func TestIndexStaleLogOfFormat1(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Directory.kb.idx")
	writeFormat1WithLog(t, p)
	stale, err := os.ReadFile(p + logSuffix)
	if err != nil {
		t.Fatal(err)
	}
	z, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	z.Set("c", &Entry{SHA256: "02"}) // undoes the log's deletion
	want := entries(z)
	if err := z.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p+logSuffix, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(fileAt(p))
	if err != nil || !reflect.DeepEqual(entries(got), want) {
		t.Fatalf("a stale log of format 1 was replayed: %v\n got %+v\nwant %+v", err, entries(got), want)
	}
	got.Set("later", &Entry{SHA256: "03"})
	want["later"] = Entry{SHA256: "03"}
	if err := got.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	if again, err := Load(fileAt(p)); err != nil || !reflect.DeepEqual(entries(again), want) {
		t.Fatalf("after an append over a stale log: %v\n got %+v\nwant %+v", err, entries(again), want)
	}
}

// TestCheckOffersToDeleteOnlyDamagedIndexes: an index that cannot be read
// for another reason than damage (here a directory where the file would
// be; a full disk or a missing permission did it too) is reported, but
// repair does not delete it: the next sync would no longer know which
// files are cortex-sync's.
func TestCheckOffersToDeleteOnlyDamagedIndexes(t *testing.T) {
	d := saved(t)
	p := filepath.Join(d.Sub("trees").Path(), "Directory.kb.idx")
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
	var found *state.Finding
	for _, f := range d.Check(Check) {
		if f.File == filepath.Join("trees", "Directory.kb.idx") {
			found = &f
		}
	}
	if found == nil || found.OK || found.Repairable || strings.Contains(found.Fix, "delete") {
		t.Fatalf("finding: %+v, want a problem that repair leaves alone", found)
	}
	if _, err := d.Repair(d.Check(Check)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("repair deleted what was not a damaged index: %v", err)
	}
}

// TestIndexBaseCutShortWhileOpen: another program cuts an open base short.
// Reads past the cut give nothing (never a crash), and the save that would
// build on them fails, naming the file; the base on disk is left as it is.
func TestIndexBaseCutShortWhileOpen(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Directory.kb.idx")
	x := NewAt(fileAt(p))
	for i := range 50000 {
		x.Set(fmt.Sprintf("f%05d", i), &Entry{Stat: hostfs.Stat{Ino: uint64(i), Mode: 0o644}, SHA256: strings.Repeat("ab", 32)})
	}
	if err := x.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	y, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, headerSize+rowSize*10); err != nil {
		t.Fatal(err)
	}
	if e := y.Get("f49999"); e != nil {
		t.Errorf("read past the cut: %+v", e)
	}
	y.Set("new", &Entry{Stat: hostfs.Stat{Mode: 0o644}})
	err = y.Save(fileAt(p))
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("save over a base cut short: %v, want an error naming %s", err, p)
	}
	if fi, _ := os.Stat(p); fi.Size() != headerSize+rowSize*10 {
		t.Errorf("the base was rewritten: %d bytes", fi.Size())
	}
}

// TestCheckCallsAnIndexTempFileATempFile: a kill while an index was being
// written leaves its temp file, named for the index; check reports it
// once, as a temp file to delete, not as a corrupt index that costs the
// tree's ownership (the crash suite's kill found it so).
func TestCheckCallsAnIndexTempFileATempFile(t *testing.T) {
	d := saved(t)
	name := ".cortex-sync-" + strconv.Itoa(deadPID(t)) + "-rv-Directory.kb.idx"
	if err := os.MkdirAll(d.Sub("trees").Path(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Sub("trees").Path(), name), []byte("CSIX half"), 0o600); err != nil {
		t.Fatal(err)
	}
	var found []state.Finding
	for _, f := range d.Check(Check) {
		if f.File == filepath.Join("trees", name) {
			found = append(found, f)
		}
	}
	if len(found) != 1 || !strings.Contains(found[0].What, "temp file") || strings.Contains(found[0].What, "corrupt") {
		t.Fatalf("findings for %s: %+v, want one: a temp file", name, found)
	}
}
