package index

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// TestIndexIntents: intents recorded beside an index are read by the next
// load (each for a path once), listed with the entries of their
// directory, kept by a save, cut at a torn append that the next Intend
// writes over, and gone once cleared; a tree the snapshot does not record
// loads its index only while an intent log says a write of it ran.
func TestIndexIntents(t *testing.T) {
	p := filepath.Join(t.TempDir(), "trees", "Directory.kb.idx")
	file := func(sum string) *Entry {
		return &Entry{Stat: hostfs.Stat{Size: 3, Mode: 0o644}, SHA256: sum, ContentID: "git:" + sum[:40]}
	}
	dir := &Entry{Stat: hostfs.Stat{Mode: fs.ModeDir | 0o755}}
	link := &Entry{Stat: hostfs.Stat{Mode: fs.ModeSymlink | 0o777}, Target: "d/a"}
	sumA, sumB := "aa00000000000000000000000000000000000000000000000000000000000000", "bb00000000000000000000000000000000000000000000000000000000000000"

	x, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	x.Set("d/a", file(sumA))
	if err := x.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	if err := x.Intend(Intended{"d/a", file(sumB)}, Intended{"d/new", dir}); err != nil {
		t.Fatal(err)
	}
	if err := x.Intend(Intended{"d/new/f", file(sumA)}, Intended{"link", link}, Intended{"d/new/f", file(sumB)}, Intended{"d/new/f", file(sumA)}); err != nil {
		t.Fatal(err)
	}
	if err := x.SyncIntents(); err != nil {
		t.Fatal(err)
	}

	check := func(what string, y *Index) {
		t.Helper()
		type rec struct {
			p string
			e Entry
		}
		want := []rec{{"d/a", *file(sumB)}, {"d/new", *dir}, {"d/new/f", *file(sumA)}, {"d/new/f", *file(sumB)}, {"link", *link}}
		var got []rec
		for rel, e := range y.AllIntents() {
			got = append(got, rec{rel, *e})
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: intents %v, want %v", what, got, want)
		}
		if es := y.Intents("d/new/f"); len(es) != 2 || *es[0] != *file(sumA) || *es[1] != *file(sumB) {
			t.Errorf("%s: Intents(d/new/f) = %+v, want both contents once", what, es)
		}
		if e := y.Get("d/a"); e == nil || e.SHA256 != sumA {
			t.Errorf("%s: the entry of d/a is %+v, want the one saved", what, e)
		}
		kids := y.Children("d")
		if c := kids["a"]; c.Entry == nil || len(c.Intents) != 1 || c.Intents[0].SHA256 != sumB {
			t.Errorf("%s: Children(d)[a] = %+v, want the entry and the intent", what, c)
		}
		if c := kids["new"]; c.Entry != nil || len(c.Intents) != 1 || !c.Intents[0].Mode.IsDir() || !c.Below {
			t.Errorf("%s: Children(d)[new] = %+v, want an intended directory with intents below", what, c)
		}
		if !y.Dirty() {
			t.Errorf("%s: an index with intents is not dirty: nothing would clear them", what)
		}
	}
	y, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	check("loaded", y)

	// A torn append: what follows the last whole frame is ignored, and
	// written over by the next intent.
	f, err := os.OpenFile(p+intentSuffix, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0x40, 1, 2, 3})
	f.Close()
	y, err = Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	check("torn", y)
	if err := y.Intend(Intended{"z", dir}); err != nil {
		t.Fatal(err)
	}
	if z, err := Load(fileAt(p)); err != nil || len(z.Intents("z")) != 1 {
		t.Fatalf("an intent after a torn tail is lost (%v)", err)
	}

	// A save keeps them, and an unrecorded tree's load then has the index
	// and them. Cleared while unrecorded, the index stays the tree's;
	// cleared once recorded, the log is gone and an unrecorded load is a
	// new index; removed, nothing is left.
	y.Set("d/b", file(sumA))
	if err := y.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	if y.Intents("link") == nil || y.Get("d/b") == nil {
		t.Fatalf("after a save: intents %v, entry %v", y.Intents("link"), y.Get("d/b"))
	}
	unrecorded := func(what string, entries bool, intents bool) {
		t.Helper()
		n, err := LoadUnrecorded(fileAt(p))
		if err != nil {
			t.Fatal(err)
		}
		if (n.Get("d/b") != nil) != entries || (n.Intents("d/new") != nil) != intents {
			t.Fatalf("%s: LoadUnrecorded has entry %v, intents %v; want entries %v, intents %v", what, n.Get("d/b"), n.Intents("d/new"), entries, intents)
		}
	}
	unrecorded("with intents", true, true)
	if err := y.ClearIntents(false); err != nil {
		t.Fatal(err)
	}
	unrecorded("cleared, unrecorded", true, false)
	z, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	if !z.Dirty() {
		t.Fatal("an index with an empty intent log is not dirty: nothing would remove it")
	}
	if err := z.ClearIntents(true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p + intentSuffix); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the intent log is still there after ClearIntents (%v)", err)
	}
	unrecorded("cleared, recorded", false, false)
	if z, err = Load(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	if z.Intents("link") != nil || z.Dirty() || z.Get("d/b") == nil {
		t.Fatalf("after ClearIntents: intents %v, dirty %v, entry %v", z.Intents("link"), z.Dirty(), z.Get("d/b"))
	}
	z.Intend(Intended{"x", dir})
	if err := z.Remove(); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(p + "*"); len(left) > 0 {
		t.Fatalf("left after Remove: %v", left)
	}
}

// TestIndexIntentsInMemory: an index kept in memory has nowhere to record
// intents, and says so.
func TestIndexIntentsInMemory(t *testing.T) {
	if err := New().Intend(Intended{"a", &Entry{}}); err == nil {
		t.Fatal("an index in memory recorded an intent")
	}
}

// TestIndexIntentsReadWhenAsked: the intents of a log are read at the
// first question about them, not with the index: a save, which loads the
// index again beside the log its own write filled, holds none of them in
// memory, and clearing them reads nothing. An index asked after another
// write appended to the log answers with what was there when it was
// loaded.
func TestIndexIntentsReadWhenAsked(t *testing.T) {
	p := filepath.Join(t.TempDir(), "trees", "Directory.kb.idx")
	file := func(rel string) *Entry {
		return &Entry{Stat: hostfs.Stat{Size: int64(len(rel)), Mode: 0o644}, SHA256: "sum of " + rel, ContentID: "id of " + rel}
	}
	x := NewAt(fileAt(p))
	const batches, batch = 4, 1000
	for b := range batches {
		es := make([]Intended, batch)
		for i := range es {
			rel := fmt.Sprintf("d%d/f%04d", b, i)
			es[i] = Intended{rel, file(rel)}
		}
		if err := x.Intend(es...); err != nil {
			t.Fatal(err)
		}
		if err := x.SyncIntents(); err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			x.Set(e.Path, e.Entry)
		}
	}
	if err := x.Save(fileAt(p)); err != nil {
		t.Fatal(err)
	}
	if len(x.intents) != 0 {
		t.Fatalf("the save read back the %d intents its own write recorded, before anything asked for them", len(x.intents))
	}
	if !x.Dirty() {
		t.Fatal("a saved index beside an intent log is not dirty: nothing would clear the log")
	}

	y, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Intend(Intended{"later", file("later")}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for rel, e := range y.AllIntents() {
		if *e != *file(rel) {
			t.Fatalf("intent of %s is %+v, want %+v", rel, e, file(rel))
		}
		n++
	}
	if n != batches*batch || y.Intents("later") != nil {
		t.Fatalf("an index loaded before another write appended has %d intents and %v for it, want the %d there at its load", n, y.Intents("later"), batches*batch)
	}
	if got := x.Intents("d3/f0999"); len(got) != 1 || *got[0] != *file("d3/f0999") {
		t.Fatalf("the saved index, asked, has intents %v for d3/f0999", got)
	}
	if err := x.ClearIntents(true); err != nil {
		t.Fatal(err)
	}
	z, err := Load(fileAt(p))
	if err != nil {
		t.Fatal(err)
	}
	if z.Dirty() || z.Len() != batches*batch {
		t.Fatalf("after ClearIntents: dirty %v, %d entries, want clean and %d", z.Dirty(), z.Len(), batches*batch)
	}
}
