package index

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// A tree's writer names what it is about to create on the host (a file
// renamed into place, a directory, a symlink) in the index's intent log,
// the index's name and ".intent", before it creates it: the index that
// records what was created is saved only once the write is done, and a
// write killed or failed before that would otherwise leave entries that
// nothing names as cortex-sync's. The next load holds the intents
// (Intents, AllIntents, ChildrenOf, Intending), and the next run judges each intended
// path on the host: what holds what was intended (a file with its content,
// a directory, a symlink with its target; any of them, where writes
// stopped one after another intended several) is cortex-sync's, adopted
// when still desired and deleted when not; anything else there (the
// creation never happened, or the entry changed since) is not made
// cortex-sync's by an intent. The intents are read at the first question
// about them, not with the index: a save loads the index again, and the
// log beside it then names everything the write that saved it created
// (45,912 files at a first sync), about to be cleared unread. Once an
// index that records the outcome is saved, ClearIntents empties the log; once the snapshot records the tree
// too, it removes it. An intent log, even empty, says that a write of the
// tree ran since the snapshot last recorded it: LoadUnrecorded then loads
// the index the write saved, if it got that far.
//
// The log is a header and frames as the index's log has them (see
// encodeFrame), one a call of Intend, every record a set. A frame cut
// short ends it (a torn last append), and the next Intend writes over it.

const (
	intentSuffix = ".intent"
	intentMagic  = "CSIT\x01"
)

// Intended is an entry about to be created at Path. A file's records the
// content (SHA256, ContentID, Size) and mode; its inode and timestamps
// are not yet those of the created file, so it is only ever matched by
// content.
type Intended struct {
	Path  string
	Entry *Entry
}

// intentLog is an intent log open: unread, the log as the index was
// loaded, whose intents are not yet read; else the log this index
// appends to.
type intentLog struct {
	dir    state.Dir // where it is
	f      *os.File
	end    int64 // where the whole frames end: the next frame goes there
	unread bool
	synced bool // what was written is durable
	made   bool // the file is new: its directory entry is not yet durable
}

// Intend appends entries about to be created to the intent log: written,
// not yet durable (see SyncIntents).
func (x *Index) Intend(es ...Intended) error {
	if len(es) == 0 {
		return nil
	}
	if x.file == (state.File{}) {
		return errors.New("record intents: the index is kept in memory")
	}
	x.readIntents() // those of stopped writes, never this one's
	if x.ilog == nil {
		l, err := openIntentLog(x.file.With(intentSuffix))
		if err != nil {
			return fmt.Errorf("record intents: %w", err)
		}
		x.ilog = l
	}
	frame := encodeFrame(func(yield func(string, *Entry) bool) {
		for _, e := range es {
			if !yield(e.Path, e.Entry) {
				return
			}
		}
	}, math.MaxInt64)
	if _, err := x.ilog.f.WriteAt(frame, x.ilog.end); err != nil {
		return fmt.Errorf("record intents: %w", err)
	}
	x.ilog.end += int64(len(frame))
	x.ilog.synced = false
	return nil
}

// SyncIntents makes the intents recorded so far durable.
func (x *Index) SyncIntents() error {
	l := x.ilog
	if l == nil || l.synced {
		return nil
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("record intents: %w", err)
	}
	if l.made {
		if err := l.dir.Sync(); err != nil {
			return fmt.Errorf("record intents: %w", err)
		}
		l.made = false
	}
	l.synced = true
	return nil
}

// openIntentLog opens the intent log path to append to, after its last
// whole frame; one that is missing, or not an intent log, starts anew.
func openIntentLog(path state.File) (*intentLog, error) {
	l := &intentLog{dir: path.Dir(), made: true}
	f, err := path.Dir().OpenFile(path.Name(), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		l.made = false
		f, err = path.Dir().OpenFile(path.Name(), os.O_RDWR, 0)
	}
	if err != nil {
		return nil, err
	}
	l.f = f
	if l.end, err = intentEnd(f); err != nil {
		f.Close()
		return nil, err
	}
	if l.end == 0 {
		if _, err := f.WriteAt([]byte(intentMagic), 0); err != nil {
			f.Close()
			return nil, err
		}
		l.end = int64(len(intentMagic))
	}
	if err := f.Truncate(l.end); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// intentEnd is where the whole frames of the intent log f end, read from
// its start a frame at a time (the log of a first sync names every file
// of its tree: 7.8 MB at 45,912 files); 0 when f is not an intent log.
func intentEnd(f io.Reader) (int64, error) {
	c := &countingReader{r: f}
	r := bufio.NewReaderSize(c, 64<<10)
	if magic, err := r.Peek(len(intentMagic)); err != nil || string(magic) != intentMagic {
		return 0, c.err
	}
	r.Discard(len(intentMagic))
	end := int64(len(intentMagic))
	streamFrames(r, func(payload []byte) error {
		if _, err := decodeFrame(payload); err != nil {
			return err
		}
		end = c.n - int64(r.Buffered())
		return nil
	})
	return end, c.err
}

// countingReader counts the bytes read through it, and keeps the error
// that is not the end of the file.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}

// loadIntents finds the intent log beside the index at path and where its
// whole frames end, and keeps it open, unread (see readIntents); a
// damaged one holds what it holds up to the damage, and never fails the
// load.
func (x *Index) loadIntents(path state.File) error {
	f, err := path.With(intentSuffix).Open()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read intents: %w", err)
	}
	x.intentLog = true
	end, err := intentEnd(f)
	if err != nil {
		f.Close()
		return fmt.Errorf("read intents: %w", err)
	}
	if end <= int64(len(intentMagic)) {
		f.Close() // none, or not an intent log
		return nil
	}
	x.ilog = &intentLog{f: f, end: end, unread: true, synced: true}
	return nil
}

// readIntents reads the intents of the log loaded with the index, up to
// where its whole frames ended then (a write of this index appends after
// them), and closes it; a read that fails is damage, as at the load.
func (x *Index) readIntents() {
	l := x.ilog
	if l == nil || !l.unread {
		return
	}
	defer l.f.Close()
	x.ilog = nil
	r := bufio.NewReaderSize(io.NewSectionReader(l.f, 0, l.end), 64<<10)
	r.Discard(len(intentMagic))
	streamFrames(r, func(payload []byte) error {
		recs, err := decodeFrame(payload)
		for _, r := range recs {
			if r.e != nil {
				x.intents = append(x.intents, r)
			}
		}
		return err
	})
	// Path order, each intent for a path once: writes stopped one after
	// another may each have got as far as theirs.
	slices.SortStableFunc(x.intents, func(a, b lent) int { return strings.Compare(a.p, b.p) })
	kept, from := x.intents[:0], 0 // from: where kept's run of this path starts
	for _, l := range x.intents {
		if len(kept) == from || kept[from].p != l.p {
			from = len(kept)
		}
		if !slices.ContainsFunc(kept[from:], func(k lent) bool { return *k.e == *l.e }) {
			kept = append(kept, l)
		}
	}
	x.intents = kept
}

// MaxIntentLog is the size an intent log may reach before SettleIntents
// saves the index and starts it anew: a first sync of 1,000,000 files
// wrote 167 MB of intents, about 170 bytes a file. A variable for tests.
var MaxIntentLog int64 = 32 << 20

// SettleIntents bounds the intent log of a long write: once the log
// outgrows MaxIntentLog, the index is saved (a new base, whole) and the
// log started anew, empty, as ClearIntents(false) leaves it. The caller
// vouches that the index records the outcome of every intent written so
// far (a creation done and recorded, or one that failed and stopped the
// write): the saved index names them from then on. It does nothing while
// intents of stopped writes are still to be judged, and for an index kept
// in memory. A kill at any point leaves the old log beside the old index,
// or the new index beside the old log (its intents all recorded in it),
// or the new index beside an empty log.
func (x *Index) SettleIntents() error {
	if x.ilog == nil || x.ilog.unread || x.ilog.end < MaxIntentLog || x.file == (state.File{}) || x.Intending() {
		return nil
	}
	if err := x.SyncIntents(); err != nil {
		return err
	}
	// A new base: a log of a write's worth of entries would be replayed
	// onto the heap by the next load.
	x.rewrite = true
	if err := x.Save(x.file); err != nil {
		return err
	}
	return x.ClearIntents(false)
}

// LoadUnrecorded loads the index at path of a tree the snapshot does not
// record: a new index, unless an intent log beside it says that a write
// of the tree ran since (one killed before the snapshot recorded the
// tree): then the index as that write left it, with its intents. An
// index left by a tree of the same name that was pruned, or forgotten
// (prune disabled), is not loaded.
func LoadUnrecorded(path state.File) (*Index, error) {
	if _, err := path.With(intentSuffix).Stat(); errors.Is(err, fs.ErrNotExist) {
		return NewAt(path), nil
	}
	return Load(path)
}

// ClearIntents forgets the intents, judged: every path they named is
// recorded in the index as saved, or was found not to be cortex-sync's.
// With recorded (the snapshot records the tree) the log goes; else it
// stays, empty, to say that the index as saved is the tree's.
func (x *Index) ClearIntents(recorded bool) error {
	x.closeIntents()
	x.intents, x.intentLog = nil, false
	if x.file == (state.File{}) {
		return nil
	}
	p := x.file.With(intentSuffix)
	var err error
	if recorded {
		if err = p.Dir().Remove(p.Name()); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	} else {
		err = p.Dir().WriteFile(p.Name(), []byte(intentMagic))
	}
	if err != nil {
		return fmt.Errorf("clear intents: %w", err)
	}
	return nil
}

// Remove deletes the index, its log, its intent log and the note of its
// check: its tree is gone.
func (x *Index) Remove() error {
	x.closeIntents()
	for _, p := range []state.File{x.file, x.file.With(logSuffix), x.file.With(intentSuffix), x.file.With(checkedSuffix)} {
		if err := p.Dir().Remove(p.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove index: %w", err)
		}
	}
	return nil
}

// closeIntents closes the intent log this index appended to, or the one
// it loaded and did not read.
func (x *Index) closeIntents() {
	if x.ilog != nil {
		x.ilog.f.Close()
		x.ilog = nil
	}
}

// Intents are the entries stopped writes intended at p, copies.
func (x *Index) Intents(p string) []*Entry {
	x.readIntents()
	var out []*Entry
	for i, _ := x.intents.find(p); i < len(x.intents) && x.intents[i].p == p; i++ {
		c := *x.intents[i].e
		out = append(out, &c)
	}
	return out
}

// AllIntents yields the entries stopped writes intended, in path order (a
// path as often as it has intents).
func (x *Index) AllIntents() iter.Seq2[string, *Entry] {
	return func(yield func(string, *Entry) bool) {
		x.readIntents()
		for _, l := range x.intents {
			c := *l.e
			if !yield(l.p, &c) {
				return
			}
		}
	}
}

// intendedChildren adds the intents directly in dir (below prefix) to
// out, and marks the names with intents below them.
func (x *Index) intendedChildren(prefix string, k *Kids) {
	x.readIntents()
	i, _ := x.intents.find(prefix)
	for ; i < len(x.intents) && strings.HasPrefix(x.intents[i].p, prefix); i++ {
		rest := x.intents[i].p[len(prefix):]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			k.Names = append(k.Names, rest[:j])
			k.Of = append(k.Of, Child{Below: true})
			continue
		}
		c := *x.intents[i].e
		k.Names = append(k.Names, rest)
		k.Of = append(k.Of, Child{Intents: []*Entry{&c}})
	}
}
