package index

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// cacheFile is an index of n files saved at p, its base old enough for
// its identity to be trusted (settled).
func cacheFile(t *testing.T, p string, n int) {
	t.Helper()
	x := NewAt(fileAt(p))
	for i := range n {
		x.Set(fmt.Sprintf("f%05d", i), &Entry{Stat: hostfs.Stat{Ino: uint64(i), Size: 10, Mode: 0o644}, SHA256: strings.Repeat("ab", 32), ContentID: "git:1"})
	}
	if err := x.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, p)
}

// waitSettled waits until the base at p is old enough for its identity
// to be trusted.
func waitSettled(t *testing.T, p string) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !settled(fileIDOf(fi)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the base never settled")
		}
	}
}

// loadAt loads the index at p; fresh: as another process would, with
// nothing kept from an earlier load.
func loadAt(t *testing.T, p string, fresh bool) *Index {
	t.Helper()
	if fresh {
		loaded.forget(fileAt(p))
	}
	x, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestIndexLoadAgainSkipsTheLog: the agent loads a tree's index at every
// event and saves what the event changed as a frame of its log. A load of
// the log this process saved last replays none of it: it costs what a
// load of the base alone does, however many frames the log holds.
func TestIndexLoadAgainSkipsTheLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Directory.kb.idx")
	cacheFile(t, p, 4000)
	load := func() { loadAt(t, p, false) }
	alone := testing.AllocsPerRun(5, load)
	base, _ := os.Stat(p)
	const events = 300
	for i := range events {
		y := loadAt(t, p, false)
		y.Set(fmt.Sprintf("f%05d", i), &Entry{Stat: hostfs.Stat{Ino: uint64(i), Size: 11, Mode: 0o644}, SHA256: strings.Repeat("cd", 32), ContentID: fmt.Sprintf("git:%d", i)})
		if err := y.Save(fileAt(p)); err != nil {
			t.Fatal(err)
		}
	}
	if after, _ := os.Stat(p); !os.SameFile(base, after) {
		t.Fatal("the base was rewritten: the test meant to grow a log")
	}
	withLog := testing.AllocsPerRun(5, load)
	t.Logf("allocations a load: %.0f without a log, %.0f with a log of %d frames", alone, withLog, events)
	if withLog > alone+20 {
		t.Errorf("a load of a log of %d frames saved by this process allocated %.0f, the base alone %.0f: the log was replayed", events, withLog, alone)
	}
	if got, want := entries(loadAt(t, p, false)), entries(loadAt(t, p, true)); !reflect.DeepEqual(got, want) {
		t.Fatal("the index kept differs from the index on disk")
	}
}

// indexWriterEnv makes the test binary a second cortex-sync writing an
// index: another process, with nothing in memory of this one's.
const indexWriterEnv = "CORTEX_SYNC_TEST_INDEX_WRITER"

type indexWrite struct {
	Path string
	Set  []string // paths to set (to a new entry)
	Del  []string // paths to delete
}

// writeInOtherProcess runs w in a child process.
func writeInOtherProcess(t *testing.T, w indexWrite) {
	t.Helper()
	arg, _ := json.Marshal(w)
	cmd := exec.Command(os.Args[0], "-test.run=^TestIndexWriterProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), indexWriterEnv+"="+string(arg))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the other writer: %v\n%s", err, out)
	}
}

// TestIndexWriterProcess is the child's part of writeInOtherProcess.
func TestIndexWriterProcess(t *testing.T) {
	arg := os.Getenv(indexWriterEnv)
	if arg == "" {
		t.Skip("only as another process of TestIndexSeesAnotherWriter")
	}
	var w indexWrite
	if err := json.Unmarshal([]byte(arg), &w); err != nil {
		t.Fatal(err)
	}
	x := loadAt(t, w.Path, false)
	for _, p := range w.Set {
		x.Set(p, otherEntry(p))
	}
	for _, p := range w.Del {
		x.Delete(p)
	}
	if err := x.Save(fileAt(w.Path)); err != nil {
		t.Fatal(err)
	}
}

func otherEntry(p string) *Entry {
	return &Entry{Stat: hostfs.Stat{Ino: 7, Size: int64(len(p)), Mode: 0o600}, SHA256: strings.Repeat("ef", 32), ContentID: "git:other " + p}
}

// TestIndexSeesAnotherWriter: an index this process keeps is loaded again
// as another writer (a sync by hand, in its own process) left it: a log
// it appended to, a base it rewrote, a log changed in place.
func TestIndexSeesAnotherWriter(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Directory.kb.idx")
	cacheFile(t, p, 1000)
	want := entries(loadAt(t, p, true))
	ours := func(i int) {
		t.Helper()
		x := loadAt(t, p, false)
		k := fmt.Sprintf("f%05d", i)
		e := &Entry{Stat: hostfs.Stat{Ino: uint64(i), Size: 12, Mode: 0o644}, SHA256: strings.Repeat("12", 32), ContentID: "git:ours"}
		x.Set(k, e)
		if err := x.Save(fileAt(p)); err != nil {
			t.Fatal(err)
		}
		want[k] = *e
	}
	theirs := func(w indexWrite) {
		t.Helper()
		w.Path = p
		writeInOtherProcess(t, w)
		for _, k := range w.Set {
			want[k] = *otherEntry(k)
		}
		for _, k := range w.Del {
			delete(want, k)
		}
	}
	check := func(what string) {
		t.Helper()
		if got := entries(loadAt(t, p, false)); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the index loaded again differs from what was written: %d entries, want %d", what, len(got), len(want))
		}
		if got := loadAt(t, p, false); got.Len() != len(want) {
			t.Fatalf("%s: the index counts %d entries, want %d", what, got.Len(), len(want))
		}
	}

	ours(1)
	ours(2)
	check("our own saves")
	base, _ := os.Stat(p)
	theirs(indexWrite{Set: []string{"f00002", "new/a", "new/b"}, Del: []string{"f00003", "f00001"}})
	if after, _ := os.Stat(p); !os.SameFile(base, after) {
		t.Fatal("the other writer rewrote the base: the test meant it to append to the log")
	}
	check("another process appended to the log")
	ours(4)
	check("our save after theirs")

	var all []string
	for i := range 1000 {
		all = append(all, fmt.Sprintf("f%05d", i))
	}
	theirs(indexWrite{Set: all})
	if after, _ := os.Stat(p); os.SameFile(base, after) {
		t.Fatal("the other writer appended to the log: the test meant it to rewrite the base")
	}
	check("another process rewrote the base")
	waitSettled(t, p)
	ours(5)
	check("our save after the rewrite")

	// Bytes of a frame this process knows changed in place, the size kept:
	// the log ends at the damage, as for any other reader.
	ours(6)
	ours(7)
	check("two more frames")
	logPath := p + logSuffix
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	fresh := func() map[string]Entry { return entries(loadAt(t, p, true)) }
	data[len(data)-10] ^= 0xff // inside the last frame
	if err := os.WriteFile(logPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// A new mtime, should the write fall in the clock tick of the last.
	if err := os.Chtimes(logPath, time.Time{}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	kept := entries(loadAt(t, p, false))
	if want := fresh(); !reflect.DeepEqual(kept, want) {
		t.Fatalf("a log damaged in place: the index loaded again holds %d entries, a fresh load %d", len(kept), len(want))
	}
	if kept["f00007"].ContentID == "git:ours" {
		t.Fatal("a log damaged in place: the damaged frame was kept")
	}
}
