package state

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

func TestSnapshotRoundTrip(t *testing.T) {
	d := Dir{Path: filepath.Join(t.TempDir(), "state")}
	s, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	if s.Lineage == "" || s.Serial != 0 {
		t.Fatalf("fresh snapshot: %+v", s)
	}
	s.Put(&Entry{ID: "File/a", Kind: "File", Path: "/a", Live: &Fingerprint{Stat: hostfs.Stat{Ino: 7}, SHA256: "ab"}})
	if err := d.Save(s); err != nil {
		t.Fatal(err)
	}
	got, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got.Lineage != s.Lineage || got.Serial != 1 || got.Find("File/a").Live.Ino != 7 {
		t.Fatalf("round trip: %+v", got)
	}
	for p, want := range map[string]os.FileMode{d.Path: 0o700 | os.ModeDir, filepath.Join(d.Path, "state.json"): 0o600} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v (%v)", p, fi.Mode(), want, err)
		}
	}
}

func TestCorruptSnapshotIsAnError(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	os.WriteFile(filepath.Join(d.Path, "state.json"), []byte("{not json"), 0o600)
	if _, err := d.Load(); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("got %v, want an error naming the unreadable snapshot", err)
	}
}

func TestIndexRoundTrip(t *testing.T) {
	x := NewIndex()
	x.Entries["a/b.md"] = &IndexEntry{Stat: hostfs.Stat{Ino: 1, Size: 2, Mtime: -3, Ctime: 4, Mode: 0o644, UID: 5, GID: 6}, SHA256: "abc", ContentID: "sha256:abc"}
	x.Entries["c"] = &IndexEntry{Stat: hostfs.Stat{Mode: os.ModeDir | 0o755}}
	p := filepath.Join(t.TempDir(), "trees", "x.idx")
	if err := x.Save(p); err != nil {
		t.Fatal(err)
	}
	y, err := LoadIndex(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(y.Entries) != 2 || *y.Entries["a/b.md"] != *x.Entries["a/b.md"] || *y.Entries["c"] != *x.Entries["c"] {
		t.Fatalf("round trip: %+v", y.Entries)
	}
	// Entries as new as the index are racily clean; older ones are not.
	old := &IndexEntry{Stat: hostfs.Stat{Mtime: y.ref - 1e9, Ctime: y.ref - 1e9}}
	fresh := &IndexEntry{Stat: hostfs.Stat{Mtime: y.ref - 1e9, Ctime: y.ref}}
	if y.Racy(old) || !y.Racy(fresh) {
		t.Fatalf("racy: old %v fresh %v", y.Racy(old), y.Racy(fresh))
	}
	os.WriteFile(p, []byte("CSIX\x01\xff"), 0o600)
	if _, err := LoadIndex(p); err == nil {
		t.Fatal("a truncated index loaded without error")
	}
}

func TestLockNamesHolder(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	ctx := context.Background()
	first, err := d.Lock(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = d.Lock(ctx, 150*time.Millisecond)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "held by pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("gave up after %s, before the timeout", waited)
	}
	first.Unlock()
	second, err := d.Lock(ctx, time.Second)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	second.Unlock()
}

// BenchmarkLoadIndex decodes the index of an 11,500-file tree, the size of
// GOROOT/src; JSON for as many entries costs about 35 ms.
func BenchmarkLoadIndex(b *testing.B) {
	x := NewIndex()
	for i := range 11500 {
		x.Entries["src/pkg"+strconv.Itoa(i/40)+"/file"+strconv.Itoa(i)+".go"] = &IndexEntry{
			Stat:      hostfs.Stat{Ino: uint64(i), Size: 12345, Mtime: 1 << 60, Ctime: 1 << 60, Mode: 0o644},
			SHA256:    strings.Repeat("ab", 32),
			ContentID: "sha256:" + strings.Repeat("cd", 32),
		}
	}
	p := filepath.Join(b.TempDir(), "x.idx")
	if err := x.Save(p); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadIndex(p); err != nil {
			b.Fatal(err)
		}
	}
}
