package driver

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cortex-sync/cortex-sync/internal/slicepool"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"golang.org/x/sys/unix"
)

// maxHeldOps is the most changes of one tree a plan holds as work to do.
// Beyond it the plan keeps only what it shows, and sync plans the tree
// again as it writes it, directory by directory (writeTree): an initial
// sync of a large tree never holds an op per file.
var maxHeldOps = 1024

// treePlan is what planning a tree found.
type treePlan struct {
	files []diff.FileChange // every change, in the order sync makes them
	ops   []treeOp          // the work; nil when there were too many to hold
	// writes counts the files to write, for the progress of a tree planned
	// again as it is written.
	writes int
}

// planTree compares the desired tree, the index of what was written and the
// live tree directory by directory: the source's walk is cut into its
// directories as it goes, and each directory is compared with the host's
// entries in it and the index's, in parallel, hashing only what the quick
// check cannot clear. A desired directory is decided as the walk meets it,
// before what is inside. Only changes are kept; no side is held whole.
//
// With out set, each directory's changes are carried out as soon as they
// are decided, and nothing is kept.
//
// Its phases: what the plan looks at (the scope, a scan of the index),
// the comparing goroutines started, the source walked and cut into
// directories handed to them, the last open directories handed over and
// the comparisons waited for, and the plan put in order.
func planTree(ctx context.Context, env *Env, r *resource.Resource, spec *DirectorySpec, top *hostfs.Dir, ix *treeIndex, out *treeWriter) (*treePlan, error) {
	p := &treePlanner{env: env, r: r, spec: spec, top: top, ix: ix, out: out, yielded: yieldedPaths(env, r)}
	if top != nil && ix.x != nil && ix.x.Len() > 0 {
		p.scope = env.Scope // what an event named, in a tree written before
	}
	cs := p.startComparing(ctx)
	p.scanIndex()
	w := &treeWalk{p: p, cs: cs, stack: []*dirFrame{{host: top}}}
	srcErr := p.walkSource(w.add)
	w.handOver(srcErr == nil)
	err := cs.wait()
	switch {
	case err != nil:
	case w.err != nil:
		err = w.err
	case srcErr != nil:
		err = fmt.Errorf("read source %s: %w", spec.Source, srcErr)
	}
	if err != nil {
		return nil, err
	}
	if out != nil {
		return nil, nil
	}
	return p.plan(), nil
}

// comparers are the goroutines that compare a plan's directories, and the
// batch of directories being made for them.
//
// They live as long as the plan: one per directory would grow a fresh
// stack for each (a comparison runs deep), which cost as much as the
// comparing. They are handed directories in batches of about batchEntries
// entries: waking a worker for each small directory cost more than
// comparing it. A directory handed over holds its host directory, and its
// source directory until its files settle, open: at most inFlight(workers)
// are handed over and not yet compared, the walk waiting for the workers
// beyond that.
type comparers struct {
	batches chan []*dirFrame
	slots   chan struct{}
	wg      sync.WaitGroup
	failed  atomic.Bool
	errOnce sync.Once
	err     error // the first comparison's that failed; read after wait

	batch   []*dirFrame // being made, by the walk
	batched int         // entries in batch
}

// startComparing starts the goroutines that compare the directories
// handed to them (env.Concurrency, at least one).
func (p *treePlanner) startComparing(ctx context.Context) *comparers {
	workers := max(1, p.env.Concurrency)
	c := &comparers{batches: make(chan []*dirFrame, workers), slots: make(chan struct{}, inFlight(workers))}
	for range workers {
		c.wg.Go(func() {
			for batch := range c.batches {
				for _, f := range batch {
					if !c.failed.Load() {
						if err := p.compare(ctx, f.host, f.rel, f.entries, f.implied, f.seen); err != nil {
							c.errOnce.Do(func() { c.err = err })
							c.failed.Store(true)
						}
					}
					f.close(p.top)
					<-c.slots
				}
			}
		})
	}
	return c
}

// hand gives the comparers a complete directory, in the next batch.
func (c *comparers) hand(f *dirFrame) {
	select {
	case c.slots <- struct{}{}:
	default:
		c.flush() // what holds the slots is then the workers' to free
		c.slots <- struct{}{}
	}
	c.batch = append(c.batch, f)
	c.batched += len(f.entries) + 1
	if c.batched >= batchEntries || len(c.batch) >= batchFrames {
		c.flush()
	}
}

// flush sends the batch being made, if any.
func (c *comparers) flush() {
	if len(c.batch) > 0 {
		c.batches <- c.batch
		c.batch, c.batched = nil, 0
	}
}

// wait sends the last batch, waits for every comparison to end and
// returns the first that failed.
func (c *comparers) wait() error {
	c.flush()
	close(c.batches)
	c.wg.Wait()
	return c.err
}

// scanIndex sets the planner to read a tree written before, looked at
// whole, front to back as the walk meets its files: a directory that
// turns out unchanged needs no listing of the index either.
func (p *treePlanner) scanIndex() {
	if p.scope != nil || p.top == nil || p.env.recalled() || p.env.Verify {
		return
	}
	p.ix.mu.Lock()
	if p.ix.x.Len() > 0 && !p.ix.x.Intending() {
		p.scan = p.ix.x.Scan()
	}
	p.ix.mu.Unlock()
}

// walkSource walks the desired tree, handing add its directories, files
// and symlinks: the index's record when the source is recalled, else the
// source's tree (a walk that leaves the stats to the comparers where the
// tree can, the scope alone when there is one). A Directory with no
// source walks nothing.
func (p *treePlanner) walkSource(add func(source.Entry) error) error {
	env, spec := p.env, p.spec
	switch {
	case spec.sourcePath != "" && env.recalled():
		return recalledWalk(p.ix.x, add)
	case spec.sourcePath != "":
		walk := env.Tree.Walk
		if w, ok := env.Tree.(source.StatLaterWalker); ok {
			// The walk is the plan's slowest part: the comparing
			// goroutines stat its files instead (compare).
			walk = w.WalkStatLater
		}
		if p.scope != nil {
			walk = func(dir string, fn func(source.Entry) error) error {
				return source.WalkScope(env.Tree, dir, p.scope, fn)
			}
		}
		return walk(spec.sourcePath, func(e source.Entry) error {
			if !e.Mode.IsDir() && !e.Mode.IsRegular() && e.Mode&fs.ModeSymlink == 0 {
				return nil
			}
			err := add(e)
			if err != nil {
				e.Release() // not kept: a frame releases what it keeps
			}
			return err
		})
	}
	return nil
}

// treeWalk cuts the source's walk into its directories: the open
// directories of the walk, top first. A directory is complete when the
// walk leaves it, and is then handed to the comparers.
type treeWalk struct {
	p     *treePlanner
	cs    *comparers
	stack []*dirFrame
	seq   int   // the next entry's place in the walk
	err   error // the walk's own, deciding a directory
}

// add takes the walk's next entry into its directory's frame: the
// directories the walk left are handed over, those it entered without
// naming them are opened, and a desired directory is decided at once and
// opened for what is inside.
func (w *treeWalk) add(e source.Entry) error {
	p := w.p
	if w.cs.failed.Load() {
		return errStopped
	}
	if !p.relevant(e.Path) {
		e.Release()
		return nil
	}
	parent := "" // a walk's paths are clean
	if i := strings.LastIndexByte(e.Path, '/'); i >= 0 {
		parent = e.Path[:i]
	}
	w.leave(parent)
	if err := w.enterImplied(parent); err != nil {
		w.err = err
		return errStopped
	}
	f := w.stack[len(w.stack)-1]
	de := desiredEntry{Entry: e, seq: w.seq}
	if p.scan != nil && !e.Mode.IsDir() {
		p.ix.mu.Lock()
		de.recorded = p.scan.Find(e.Path, &de.rec)
		p.ix.mu.Unlock()
	}
	f.entries = append(entrySlices.Grow(f.entries), de)
	w.seq++
	if e.Mode.IsDir() {
		host, seen, err := p.dirEntry(f.host, de)
		if err != nil {
			w.err = fmt.Errorf("%s: %w", path.Join(p.spec.Path, e.Path), err)
			return errStopped
		}
		w.stack = append(w.stack, &dirFrame{rel: e.Path, host: host, seen: seen})
	}
	return nil
}

// leave hands over the open directories that parent is not within: the
// walk is done with them.
func (w *treeWalk) leave(parent string) {
	for len(w.stack) > 1 && !within(parent, w.stack[len(w.stack)-1].rel) {
		w.cs.hand(w.stack[len(w.stack)-1])
		w.stack = w.stack[:len(w.stack)-1]
	}
}

// enterImplied opens a frame for each directory between the innermost
// open one and parent that the walk did not name (an index without its
// directory's entry): their entries are compared all the same.
func (w *treeWalk) enterImplied(parent string) error {
	for f := w.stack[len(w.stack)-1]; f.rel != parent; f = w.stack[len(w.stack)-1] {
		next := parent
		if i := strings.IndexByte(parent[len(f.rel):][min(1, len(f.rel)):], '/'); i >= 0 {
			next = parent[:len(f.rel)+min(1, len(f.rel))+i]
		}
		if f.implied == nil {
			f.implied = map[string]bool{}
		}
		f.implied[path.Base(next)] = true
		host, err := openSub(f.host, path.Base(next))
		if err != nil {
			return err
		}
		w.stack = append(w.stack, &dirFrame{rel: next, host: host})
	}
	return nil
}

// handOver ends the walk: the directories still open are handed over,
// innermost first, when the walk went through (complete); else they are
// released uncompared.
func (w *treeWalk) handOver(complete bool) {
	for i := len(w.stack) - 1; i >= 0; i-- {
		if complete {
			w.cs.hand(w.stack[i])
		} else {
			w.stack[i].close(w.p.top)
		}
	}
}

// plan orders what the planner kept as sync carries it out: desired
// entries in the walk's order, then live entries that are not desired, in
// path order.
func (p *treePlanner) plan() *treePlan {
	order := func(a, b shownOp) int {
		switch {
		case a.gone != b.gone:
			if a.gone {
				return 1
			}
			return -1
		case a.gone || p.env.recalled():
			// Recalled entries came in path order before they came by
			// directory: their changes are listed in it.
			return strings.Compare(a.Path, b.Path)
		}
		return a.seq - b.seq
	}
	slices.SortFunc(p.shown, order)
	t := &treePlan{files: make([]diff.FileChange, len(p.shown)), writes: p.writes}
	for i, s := range p.shown {
		t.files[i] = s.FileChange
	}
	keys := slices.SortedFunc(maps.Keys(p.counted), func(a, b shownKey) int {
		return cmp.Or(order(shownOp{gone: a.gone}, shownOp{gone: b.gone}), strings.Compare(string(a.action), string(b.action)), strings.Compare(string(a.reason), string(b.reason)))
	})
	for _, k := range keys {
		t.files = append(t.files, diff.FileChange{Action: k.action, Reason: k.reason, Count: p.counted[k]})
	}
	if !p.overflow {
		slices.SortFunc(p.ops, func(a, b treeOp) int { return order(a.shown(false), b.shown(false)) })
		slices.SortFunc(p.gone, func(a, b treeOp) int { return strings.Compare(a.rel, b.rel) })
		t.ops = append(p.ops, p.gone...)
	}
	return t
}

// A batch of directories handed to a comparing goroutine ends once it
// holds batchEntries entries or batchFrames directories.
const (
	batchEntries = 256
	batchFrames  = 8
)

// inFlight is how many directories a plan hands to its workers before
// they have compared them, each holding up to two open: enough for a
// batch in each worker's hands, one queued and one being made, and never
// more than 128 however many workers (a plan of 3,000 directories at
// --concurrency 8 held 547 descriptors at once with no bound).
func inFlight(workers int) int { return min(batchFrames*(workers+2), 128) }

// errStopped ends the source's walk once a directory's comparison failed.
var errStopped = errors.New("stopped")

// within reports whether dir is top or below it.
func within(dir, top string) bool {
	return top == "" || dir == top || strings.HasPrefix(dir, top+"/")
}

// treePlanner holds what the directories of one tree's plan share.
type treePlanner struct {
	env  *Env
	r    *resource.Resource
	spec *DirectorySpec
	top  *hostfs.Dir // nil when the tree is not on the host
	out  *treeWriter // carries out changes as they are decided; nil: kept

	ix       *treeIndex // what was written, checked and written since
	mu       sync.Mutex // guards what is kept
	ops      []treeOp   // for desired entries, while there are few
	gone     []treeOp   // for live entries that are not desired, likewise
	shown    []shownOp  // every change, for the plan's display
	overflow bool       // too many changes to hold ops for
	writes   int        // files to write
	// counted replaces shown beyond maxHeldOps when the plan is only to
	// be applied (Env.CountFiles).
	counted map[shownKey]int
	// scan, when not nil, finds each desired file's index entry as the
	// walk meets it (desiredEntry.rec).
	scan *index.Scan
	// scope, when not nil, narrows the plan to these entries (each with
	// what is below it) and the directories on the way to them: what a
	// watch event named (Env.Scope).
	scope []string
	// yielded are host paths the mirror leaves alone in this pass (see
	// yieldedPaths).
	yielded map[string]bool
}

// relevant reports whether the entry at rel is looked at: in the scope,
// or a directory on the way to it.
func (p *treePlanner) relevant(rel string) bool {
	if p.scope == nil || rel == "" {
		return true
	}
	for _, s := range p.scope {
		if rel == s || strings.HasPrefix(rel, s+"/") || strings.HasPrefix(s, rel+"/") {
			return true
		}
	}
	return false
}

// whole reports whether every entry of the directory at rel is looked at
// (it is in the scope), rather than those on the way to it alone.
func (p *treePlanner) whole(rel string) bool {
	if p.scope == nil {
		return true
	}
	for _, s := range p.scope {
		if rel == s || strings.HasPrefix(rel, s+"/") {
			return true
		}
	}
	return false
}

// scoped are the names of the directory at rel on the way to the scope.
func (p *treePlanner) scoped(rel string) []string {
	var names []string
	for _, s := range p.scope {
		rest, ok := strings.CutPrefix(s, rel+"/")
		if rel == "" {
			rest, ok = s, true
		}
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, "/")
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// shownKey is a kind of change, as counted.
type shownKey struct {
	action diff.Action
	reason diff.Reason
	gone   bool
}

// shownOp is a change as the plan shows it, and its place in the order.
type shownOp struct {
	diff.FileChange
	seq  int
	gone bool // a live entry that is not desired
}

func (op *treeOp) shown(gone bool) shownOp {
	return shownOp{FileChange: diff.FileChange{Path: op.rel, Action: op.action, Reason: op.reason}, seq: op.seq, gone: gone}
}

// dirFrame is a directory of the desired tree and its entries.
type dirFrame struct {
	rel     string
	host    *hostfs.Dir // the directory on the host; nil when there is none
	entries []desiredEntry
	implied map[string]bool // subdirectories with frames of their own though not entries
	seen    seenDir         // the directory as the walk met it
}

// close releases the frame's directory unless it is the tree's top, and
// its entries, whether they were compared or not (what a walk for stats
// later holds open for them goes).
func (f *dirFrame) close(top *hostfs.Dir) {
	if f.host != nil && f.host != top {
		f.host.Close()
		f.host = nil
	}
	for i := range f.entries {
		f.entries[i].Release()
	}
	entrySlices.Put(f.entries)
	f.entries = nil
}

// A tree's directories take their entries' slices, and compare its maps
// and index children, from pools: a walk of many directories reuses a
// few, where each directory's own cost the collector as much as the rest
// of the plan.
var (
	kidsPool = sync.Pool{New: func() any { return new(index.Kids) }}
	liveMaps = sync.Pool{New: func() any { return map[string]liveEntry{} }}
	wantMaps = sync.Pool{New: func() any { return map[string]fs.FileMode{} }}
)

// entrySlices are the frames' entries, by size: one pool of any size
// handed each directory whatever the last gave back, and one too small
// grew again, doubling, for a quarter of the directories of a tree (316
// of 1,324 at 11,478 files, 3 MB copied).
var entrySlices = slicepool.Pool[desiredEntry]{Smallest: 8}

// pooledMap is the most entries a map given back to its pool held: a
// map is cleared at the cost of the most it ever held, and a large
// directory's would cost every small one after it as much.
const pooledMap = 256

// putLive gives a map of listHost's back once its caller is done with it.
func putLive(m map[string]liveEntry) {
	if m != nil && len(m) <= pooledMap {
		clear(m)
		liveMaps.Put(m)
	}
}

// desiredEntry is an entry of the desired walk and its place in it: ops
// run in that order.
type desiredEntry struct {
	source.Entry
	seq int
	// rec is the index's entry for a file, found as the walk met it
	// (recorded: there is one), when the planner scans the index.
	rec      index.Found
	recorded bool
}

// openSub opens the directory name in d; nil when d is nil or name is not
// a directory there (missing, another type, a symlink).
func openSub(d *hostfs.Dir, name string) (*hostfs.Dir, error) {
	if d == nil {
		return nil, nil
	}
	sub, err := d.OpenDir(name)
	if missing(err) || errors.Is(err, unix.ELOOP) {
		return nil, nil
	}
	return sub, err
}

// dirEntry decides a desired directory as the walk meets it, in its
// parent on the host (nil: not there): a sync that writes as it plans
// makes the directory at once, so that what is inside has somewhere to go.
// It returns the directory on the host, nil when there is none, and how
// the walk found it.
func (p *treePlanner) dirEntry(parent *hostfs.Dir, e desiredEntry) (*hostfs.Dir, seenDir, error) {
	name := path.Base(e.Path)
	var live *hostfs.Stat
	if parent != nil {
		st, err := parent.Lstat(name)
		switch {
		case missing(err):
		case err != nil:
			return nil, seenDir{}, err
		default:
			live = &st
		}
	}
	prev := p.ix.get(e.Path)
	seen := seenDir{desired: true}
	op := treeOp{rel: e.Path, mode: mirrorMode(e.Entry), typ: fs.ModeDir, entry: e.Entry, seq: e.seq}
	o := diff.Observation{Desired: true, Recorded: prev != nil, Exists: live != nil}
	switch {
	case live == nil:
	case !live.Mode.IsDir():
		o.WrongType = typeName(live.Mode)
	default:
		o.Matches, o.Ours = true, true
		switch {
		case live.Mode.Perm() != op.mode:
			o.Attrs = []diff.Attr{{Field: "mode"}}
		case prev != nil && prev.Stat.Same(*live):
			// As recorded, with what its listing held then.
			seen.stat, seen.prev = live, prev
		default:
			p.ix.set(e.Path, &index.Entry{Stat: *live}, false)
			seen.stat = live
		}
	}
	if op.decide(&o) {
		if p.out == nil {
			p.keep([]treeOp{op}, nil)
		} else if err := p.out.makeDir(parent, name, &op); err != nil {
			return nil, seenDir{}, err
		}
	}
	if live == nil && p.out == nil {
		return nil, seen, nil
	}
	d, err := openSub(parent, name)
	return d, seen, err
}

// compare decides a directory's entries other than directories (decided
// as the walk met them): the desired ones against what the host and the
// index hold, then the host's that are not desired, and forgets recorded
// entries that are on neither side.
//
// Its phases: the source's entries settled; the host and the index looked
// at (look); each desired entry decided (decideDesired), then each live
// one that is not (decideUndesired); recorded entries on neither side
// forgotten (forget); the changes carried out or kept; and the
// directory's names recorded for the next plan (recordNames).
func (p *treePlanner) compare(ctx context.Context, host *hostfs.Dir, rel string, desired []desiredEntry, implied map[string]bool, seen seenDir) error {
	for i := range desired {
		if err := desired[i].Settle(); err != nil {
			return fmt.Errorf("read source %s: %w", p.spec.Source, err)
		}
	}
	d := &dirCompare{host: host, rel: rel, desired: desired, implied: implied, seen: seen}
	d.recorded = kidsPool.Get().(*index.Kids)
	defer kidsPool.Put(d.recorded)
	if err := p.look(d); err != nil {
		return err
	}
	defer putLive(d.live)
	d.want = wantMaps.Get().(map[string]fs.FileMode)
	defer func() {
		if len(d.want) <= pooledMap {
			clear(d.want)
			wantMaps.Put(d.want)
		}
	}()
	if err := p.decideDesired(ctx, d); err != nil {
		return err
	}
	if err := p.decideUndesired(ctx, d); err != nil {
		return err
	}
	p.forget(d)
	wrote := p.out != nil && len(d.ops)+len(d.gone) > 0
	if p.out != nil {
		if err := p.out.writeDir(ctx, host, rel, d.ops, d.gone); err != nil {
			return err
		}
	} else {
		p.keep(d.ops, d.gone)
	}
	p.recordNames(d, wrote)
	return nil
}

// dirCompare is one directory's comparison, as its phases share it.
type dirCompare struct {
	host    *hostfs.Dir // nil when there is none
	rel     string
	desired []desiredEntry
	implied map[string]bool
	seen    seenDir

	// names digests the desired names, when the directory's record of
	// them can be used or written; "" when not.
	names string
	// unlisted: the directory has not changed since it held exactly the
	// desired names, so the host's listing is not read.
	unlisted bool
	// fast: unlisted, and the walk found each file's record (when the
	// directory held exactly these names, the rest was forgotten): each
	// is looked at alone, no map of either side.
	fast     bool
	recorded *index.Kids            // the index's entries here (none when fast)
	live     map[string]liveEntry   // the host's entries looked at (nil when fast)
	want     map[string]fs.FileMode // the desired names and modes (empty when fast)

	ops  []treeOp // for desired entries
	gone []treeOp // for live entries that are not desired
}

// look reads what the comparison weighs: the index's entries in the
// directory, and the host's, listed whole, only the desired names (as
// the directory's record allows), only the names on the way to the
// scope, or none (fast).
func (p *treePlanner) look(d *dirCompare) error {
	seen := d.seen
	if seen.desired && (seen.stat != nil || p.out != nil) && d.implied == nil && !p.env.Verify {
		d.names = namesDigest(d.desired)
	}
	d.unlisted = p.whole(d.rel) && d.names != "" && seen.prev != nil && seen.prev.ContentID == d.names && !p.ix.racy(seen.prev.Stat)
	d.fast = d.unlisted && p.scan != nil
	if d.fast {
		d.recorded.Reset()
	} else {
		p.ix.children(d.rel, d.recorded)
	}
	var err error
	switch {
	case d.fast:
	case d.unlisted:
		// The directory has not changed since it held exactly the desired
		// names: those are looked at, and nothing else is there.
		d.live, err = statDesired(d.host, d.desired)
	case p.whole(d.rel):
		d.live, err = listHost(d.host)
	default:
		// On the way to the scope: only its names are looked at.
		names := p.scoped(d.rel)
		for _, e := range d.desired {
			names = append(names, path.Base(e.Path))
		}
		d.live, err = statHost(d.host, names)
		rel := d.rel
		d.recorded.Keep(func(name string) bool { return p.relevant(path.Join(rel, name)) })
	}
	return err
}

// decideDesired decides each desired entry other than a directory
// against the host's and the index's, into d.ops, updating the index
// with what it finds as recorded.
func (p *treePlanner) decideDesired(ctx context.Context, d *dirCompare) error {
	for i := range d.desired {
		e := &d.desired[i]
		if !d.fast {
			d.want[path.Base(e.Path)] = e.Mode
		}
		if e.Mode.IsDir() {
			continue
		}
		if err := p.decideEntry(ctx, d, e); err != nil {
			return err
		}
	}
	return nil
}

// decideEntry decides one desired file or symlink.
func (p *treePlanner) decideEntry(ctx context.Context, d *dirCompare, e *desiredEntry) error {
	name := path.Base(e.Path)
	var le liveEntry
	var ok bool
	var err error
	c, _ := d.recorded.Find(name)
	prev, intents := c.Entry, c.Intents
	if d.fast {
		if le, ok, err = liveAt(d.host, name); err != nil {
			return err
		}
		if ok && p.stands(e, le) {
			return nil
		}
		prev = p.recorded(e)
	} else {
		le, ok = d.live[name]
	}
	if ok && p.yielded[path.Join(p.spec.Path, e.Path)] {
		return nil // written in the next pass, once its File is gone
	}
	op := treeOp{rel: e.Path, mode: mirrorMode(e.Entry), entry: e.Entry, typ: e.Mode.Type(), target: e.Target, seq: e.seq}
	o := diff.Observation{Desired: true, Recorded: prev != nil, Exists: ok}
	if ok && le.Mode.Type() != e.Mode.Type() {
		o.WrongType = typeName(le.Mode)
		if le.Mode.IsDir() {
			// What is inside goes with it: its entries are weighed as
			// entries that are not desired.
			if err := p.hostOnly(ctx, d.host, e.Path); err != nil {
				return err
			}
		}
	}
	switch {
	case !ok || o.WrongType != "":
	case e.Mode&fs.ModeSymlink != 0:
		prev, o.Ours, _ = claimant(prev, intents, func(r *index.Entry) (bool, error) { return r.Target == le.target, nil })
		o.Recorded = prev != nil
		o.Matches = le.target == e.Target
		o.GitChanged = prev == nil || prev.Target != e.Target
		if o.Matches {
			p.ix.set(e.Path, &index.Entry{Stat: le.Stat, Target: le.target}, false)
		}
	default:
		if converged, err := asRecorded(p.env, e.Entry, le, prev, intents, p.ix); converged || err != nil {
			if err != nil {
				return fmt.Errorf("%s: %w", path.Join(p.spec.Path, e.Path), err)
			}
			return nil
		}
		host := d.host
		fop, entry, racy, err := planFile(p.env, p.spec.sourcePath, func() (*hostfs.Dir, error) { return host, nil }, e.Entry, le, prev, intents, p.ix.racy)
		if err != nil {
			return fmt.Errorf("%s: %w", path.Join(p.spec.Path, e.Path), err)
		}
		if fop != nil {
			fop.seq = e.seq
			d.ops = append(d.ops, *fop)
		}
		if entry != nil {
			p.ix.set(e.Path, entry, racy)
		}
		return nil
	}
	if op.decide(&o) {
		d.ops = append(d.ops, op)
	}
	return nil
}

// decideUndesired decides the live entries that are not desired, into
// d.gone: what cortex-sync wrote goes, what it did not goes only with
// purge, and never what another resource manages.
func (p *treePlanner) decideUndesired(ctx context.Context, d *dirCompare) error {
	for name, le := range d.live {
		if _, ok := d.want[name]; ok {
			continue
		}
		sub := path.Join(d.rel, name)
		c, _ := d.recorded.Find(name)
		prev, intents := c.Entry, c.Intents
		op := treeOp{rel: sub, action: diff.Delete, typ: le.Mode.Type()}
		temp := hostfs.IsTemp(name) && le.Mode.IsRegular()
		owned := false
		if !temp && (prev != nil || len(intents) > 0) {
			var err error
			if owned, err = p.ownedBelow(d.host, name, sub, le); err != nil {
				return err
			}
		}
		// A directory a stopped write made is cortex-sync's as a recorded
		// one is; another entry it intended, while it holds what was to be
		// written (else the write never got that far).
		intended := len(intents) > 0 && (owned || le.Mode.IsDir() && slices.ContainsFunc(intents, isDir))
		switch {
		case temp:
			op.reason = diff.Drifted // left by an interrupted write
		case !le.Mode.IsDir() && p.env.Set != nil && p.env.Set.ManagesWithin(path.Join(p.spec.Path, sub), p.r.ID()):
			// Another resource's now (a file of the source that is
			// encrypted now, which a File of its own decrypts): it
			// takes it over as it is, and the index forgets it.
			if prev != nil {
				p.ix.mu.Lock()
				p.ix.x.Delete(sub)
				p.ix.mu.Unlock()
			}
			continue
		case prev != nil || intended:
			op.reason, op.backup = diff.RemovedFromGit, !owned
		case p.spec.Purge && !p.env.Set.ManagesWithin(path.Join(p.spec.Path, sub), p.r.ID()):
			op.reason, op.backup = diff.Unmanaged, true
		default:
			// Not cortex-sync's, and no purge: left alone, and what is
			// inside is weighed entry by entry.
			if le.Mode.IsDir() && !d.implied[name] {
				if err := p.hostOnly(ctx, d.host, sub); err != nil {
					return err
				}
			}
			continue
		}
		if le.Mode.IsDir() && !d.implied[name] {
			p.ix.mu.Lock()
			p.ix.x.DeleteBelow(sub) // goes with the directory
			p.ix.mu.Unlock()
		}
		d.gone = append(d.gone, op)
	}
	return nil
}

// forget deletes from the index the recorded entries that are neither
// desired nor on the host, and what is recorded below those that are no
// directory on either side.
func (p *treePlanner) forget(d *dirCompare) {
	p.ix.mu.Lock()
	defer p.ix.mu.Unlock()
	for i, name := range d.recorded.Names {
		c := d.recorded.Of[i]
		le, isLive := d.live[name]
		mode, isWanted := d.want[name]
		if c.Entry != nil && !isLive && !isWanted {
			p.ix.x.Delete(path.Join(d.rel, name))
		}
		if c.Below && !(isWanted && mode.IsDir()) && !(isLive && le.Mode.IsDir()) && !d.implied[name] {
			p.ix.x.DeleteBelow(path.Join(d.rel, name))
		}
	}
}

// recordNames keeps, as the directory's index entry, the names it holds
// when they are exactly the desired ones and nothing was written (the
// next plan then need not list it), or has the writer list it again
// once its writes are in place.
func (p *treePlanner) recordNames(d *dirCompare, wrote bool) {
	switch {
	case d.names == "" || d.unlisted || !p.whole(d.rel):
	case !wrote && d.seen.stat != nil:
		if len(d.live) == len(d.want) && exactly(d.live, d.want) {
			// A racily clean record is written again, newer than the
			// directory's timestamps, as a racily clean file's is.
			racy := d.seen.prev != nil && p.ix.racy(d.seen.prev.Stat)
			if d.seen.prev == nil || d.seen.prev.ContentID != d.names || racy {
				p.ix.set(d.rel, &index.Entry{Stat: *d.seen.stat, ContentID: d.names}, racy)
			}
		}
	case p.out != nil:
		// Made or written here: what it holds is listed again once the
		// writes are in place.
		p.out.relistLater(d.rel, d.names)
	}
}

// recorded is a desired file's index entry: as the walk's scan found
// it, else as the index holds it now (the scan reads the index as it
// stood when the walk began).
func (p *treePlanner) recorded(e *desiredEntry) *index.Entry {
	if e.recorded {
		return e.rec.Entry()
	}
	return p.ix.get(e.Path)
}

// stands reports whether a desired file is converged as asRecorded finds
// it, told from the records the walk found without spelling them out:
// the live file's stat is the one recorded, and the source's stat cache
// names the content the index recorded. False is not a change: only that
// asRecorded has to look.
func (p *treePlanner) stands(e *desiredEntry, le liveEntry) bool {
	if !e.recorded || !e.Mode.IsRegular() || p.env.Verify || le.Mode.Perm() != mirrorMode(e.Entry) {
		return false
	}
	rec := e.rec.Stat()
	c, ok := e.File.(source.ContentComparer)
	if !ok || le.Stat != rec || p.ix.racy(rec) {
		return false
	}
	same, known := c.SameContent(&e.rec)
	return same && known
}

// seenDir is a desired directory as the walk found it on the host: its
// stat before anything in it was listed, and its index entry when that
// records the same stat (nil otherwise). The zero seenDir is a directory
// that is not desired (the top, or one only the host holds): its listing
// is never recorded, for the index holds only what cortex-sync wrote.
type seenDir struct {
	desired bool
	stat    *hostfs.Stat
	prev    *index.Entry
}

// namesDigest names the set of a directory's desired entries. A
// directory's index entry keeps it (as its ContentID) with the stat the
// directory had when it held exactly those names and nothing else: while
// its stat is still that one (adding, removing or renaming an entry moves
// a directory's mtime and ctime), it holds them still, and a converged
// check stats them by name without listing the directory.
func namesDigest(desired []desiredEntry) string {
	d := nameSets.Get().(*nameSet)
	defer d.reset()
	for _, e := range desired {
		d.add(path.Base(e.Path))
	}
	return d.String()
}

// nameSet digests a set of names in any order: the SHA-256 of the names
// sorted, each ended by a NUL (no name holds one), cut to 128 bits. A
// sum of each name's hash, which needs no sort, is not enough: sums of a
// public function's values collide by design (FNV-1a's made {v1, v2} and
// {v0, v3} digest the same), and the names are the repository's to pick.
type nameSet struct {
	names []string
	buf   []byte
}

// nameSets are the digests' scratch, used again.
var nameSets = sync.Pool{New: func() any { return new(nameSet) }}

func (d *nameSet) add(name string) { d.names = append(d.names, name) }

// reset empties d and gives it back to the pool.
func (d *nameSet) reset() {
	clear(d.names)
	d.names, d.buf = d.names[:0], d.buf[:0]
	nameSets.Put(d)
}

func (d *nameSet) String() string {
	slices.Sort(d.names) // the walk's order, mostly: little to move
	for _, name := range d.names {
		d.buf = append(append(d.buf, name...), 0)
	}
	sum := sha256.Sum256(d.buf)
	return "names:" + hex.EncodeToString(sum[:16])
}

// exactly reports whether every live name is a desired one.
func exactly(live map[string]liveEntry, want map[string]fs.FileMode) bool {
	for name := range live {
		if _, ok := want[name]; !ok {
			return false
		}
	}
	return true
}

// keep holds a directory's changes for the plan: every one as shown, and
// as work while the tree's are few.
func (p *treePlanner) keep(ops, gone []treeOp) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range ops {
		p.shown = append(p.shown, ops[i].shown(false))
		if ops[i].action != diff.Delete && ops[i].typ == 0 && !ops[i].chmod {
			p.writes++
		}
	}
	for i := range gone {
		p.shown = append(p.shown, gone[i].shown(true))
	}
	if !p.overflow && len(p.ops)+len(p.gone)+len(ops)+len(gone) > maxHeldOps {
		p.overflow, p.ops, p.gone = true, nil, nil
	}
	if !p.overflow {
		for i := range ops {
			ops[i].entry.Keep() // used past its directory's close
		}
		p.ops = append(p.ops, ops...)
		p.gone = append(p.gone, gone...)
		return
	}
	if p.env.CountFiles {
		// Counted, not listed: a tree's changes as many as its files.
		if p.counted == nil {
			p.counted = map[shownKey]int{}
		}
		for _, s := range p.shown {
			p.counted[shownKey{s.Action, s.Reason, s.gone}]++
		}
		p.shown = nil
	}
}

// hostOnly weighs the entries of a live directory that is not desired.
func (p *treePlanner) hostOnly(ctx context.Context, parent *hostfs.Dir, rel string) error {
	sub, err := parent.OpenDir(path.Base(rel))
	if missing(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer sub.Close()
	return p.compare(ctx, sub, rel, nil, nil, seenDir{})
}

// ownedBelow reports whether rel and everything below it is as
// cortex-sync wrote it (recorded in the index, or intended by a write that
// stopped before it recorded it), so deleting it loses nothing of anyone
// else's.
func (p *treePlanner) ownedBelow(parent *hostfs.Dir, name, rel string, le liveEntry) (bool, error) {
	prev, intents := p.ix.records(rel)
	switch {
	case le.Mode.IsDir():
		if prev == nil && !slices.ContainsFunc(intents, isDir) {
			return false, nil
		}
	case prev != nil && le.Stat.Same(prev.Stat):
		return true, nil
	default:
		hash := sync.OnceValues(func() (string, error) { return hashFile(parent, name, le.Size) })
		_, owned, err := claimant(nil, intents, func(r *index.Entry) (bool, error) {
			if le.Mode&fs.ModeSymlink != 0 {
				return r.Mode&fs.ModeSymlink != 0 && r.Target == le.target, nil
			}
			return unchanged(le.Stat, r, true, false, hash, nil)
		})
		return owned, err
	}
	sub, err := parent.OpenDir(name)
	if missing(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	defer sub.Close()
	live, err := listHost(sub)
	if err != nil {
		return false, err
	}
	defer putLive(live)
	for n, le := range live {
		if hostfs.IsTemp(n) && le.Mode.IsRegular() {
			continue // left by an interrupted write: it goes too
		}
		if ok, err := p.ownedBelow(sub, n, rel+"/"+n, le); !ok || err != nil {
			return false, err
		}
	}
	return true, nil
}

// listings counts the host directories the planner listed (for tests).
var listings atomic.Int64

// listHost lists a live directory's entries, never following symlinks;
// nothing when d is nil.
func listHost(d *hostfs.Dir) (map[string]liveEntry, error) {
	if d == nil {
		return nil, nil
	}
	listings.Add(1)
	entries, err := d.List()
	if err != nil {
		return nil, err
	}
	out := liveMaps.Get().(map[string]liveEntry)
	for _, e := range entries {
		if err := describeHost(d, e.Name, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// statDesired describes the live entries of the desired ones other than
// directories (which the walk looked at as it met them), never following
// symlinks; those missing are left out.
func statDesired(d *hostfs.Dir, desired []desiredEntry) (map[string]liveEntry, error) {
	out := liveMaps.Get().(map[string]liveEntry)
	for _, e := range desired {
		if e.Mode.IsDir() {
			continue
		}
		if err := describeHost(d, path.Base(e.Path), out); err != nil {
			putLive(out)
			return nil, err
		}
	}
	return out, nil
}

// statHost describes the named entries of a live directory, never
// following symlinks; those missing are left out.
func statHost(d *hostfs.Dir, names []string) (map[string]liveEntry, error) {
	if d == nil {
		return nil, nil
	}
	out := make(map[string]liveEntry, len(names))
	for _, name := range names {
		if _, ok := out[name]; ok {
			continue
		}
		if err := describeHost(d, name, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// describeHost adds the live entry name of d to out, never following a
// symlink (its target is read instead); one missing is left out.
func describeHost(d *hostfs.Dir, name string, out map[string]liveEntry) error {
	le, ok, err := liveAt(d, name)
	if ok {
		out[name] = le
	}
	return err
}

// liveAt is the live entry name of d, never following a symlink (its
// target is read instead); false when it is missing.
func liveAt(d *hostfs.Dir, name string) (liveEntry, bool, error) {
	st, err := d.Lstat(name)
	if missing(err) {
		return liveEntry{}, false, nil
	}
	if err != nil {
		return liveEntry{}, false, err
	}
	le := liveEntry{Stat: st}
	if st.Mode&fs.ModeSymlink != 0 {
		if le.target, err = d.Readlink(name); err != nil {
			return liveEntry{}, false, err
		}
	}
	return le, true, nil
}

// recalledWalk walks the desired tree as last written, from its index:
// what status without a source compares the host with. It goes directory
// by directory, as a source's walk does.
func recalledWalk(old *index.Index, fn func(source.Entry) error) error {
	var out []source.Entry
	for rel, prev := range old.All() {
		e := source.Entry{Path: rel, Mode: prev.Mode, Size: prev.Size,
			ContentID: func() (string, error) { return prev.ContentID, nil }}
		if prev.Mode&fs.ModeSymlink != 0 {
			e.Target = prev.Target
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b source.Entry) int { return source.ByComponent(a.Path, b.Path) })
	for _, e := range out {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// planFile observes one regular file that exists on both sides, judged by
// its index entry prev or, where writes stopped before their index was
// saved, by what they intended there. It returns the op to perform, or the
// index entry that stands when none is needed and prev does not record
// it as it is (racy: it was verified by its hash and is to be recorded
// anew). The file's directory is opened only when a file must be read,
// and the file is hashed at most once.
func planFile(env *Env, srcDir string, opened func() (*hostfs.Dir, error), e source.Entry, le liveEntry, prev *index.Entry, intents []*index.Entry, isRacy func(hostfs.Stat) bool) (*treeOp, *index.Entry, bool, error) {
	op := &treeOp{rel: e.Path, mode: mirrorMode(e), entry: e}
	name := path.Base(e.Path)
	hashed := false
	sums := sync.OnceValues(func() (hostfs.Sums, error) {
		hashed = true
		d, err := opened()
		if err != nil {
			return hostfs.Sums{}, err
		}
		return d.HashFile(name, le.Size)
	})
	hash := func() (string, error) {
		s, err := sums()
		return s.SHA256, err
	}
	fast := func() ([16]byte, error) {
		d, err := opened()
		if err != nil {
			return [16]byte{}, err
		}
		return d.XXH3File(name, le.Size)
	}
	racy := prev != nil && isRacy(prev.Stat)
	var o diff.Observation
	var err error
	// An intent holds no stat of the file created: it is judged by content.
	recorded := prev
	prev, o.Ours, err = claimant(prev, intents, func(r *index.Entry) (bool, error) {
		return unchanged(le.Stat, r, r != recorded || racy, env.Verify, hash, fast)
	})
	if err != nil {
		return nil, nil, false, err
	}
	o.Desired, o.Recorded, o.Exists = true, prev != nil, true
	id, err := e.ID()
	if err != nil {
		return nil, nil, false, err
	}
	same := false
	if prev != nil {
		if same, err = source.SameContent(prev.ContentID, id, e.LegacyFunc()); err != nil {
			return nil, nil, false, err
		}
	}
	o.GitChanged = !same
	switch {
	case o.Ours:
		o.Matches = !o.GitChanged // what cortex-sync wrote is still the desired content
	case env.recalled():
		// Known only by its ID: it is not what cortex-sync wrote.
	default:
		d, err := opened()
		if err != nil {
			return nil, nil, false, err
		}
		if o.Matches, err = sameContent(d, name, func() (io.ReadCloser, error) { return env.Tree.Open(path.Join(srcDir, e.Path)) }); err != nil {
			return nil, nil, false, err
		}
	}
	if le.Mode.Perm() != op.mode {
		o.Attrs = []diff.Attr{{Field: "mode"}}
	}
	if op.decide(&o) {
		return op, nil, false, nil
	}
	entry := &index.Entry{Stat: le.Stat, ContentID: id}
	if o.Ours {
		entry.SHA256, entry.XXH3 = prev.SHA256, prev.XXH3
	}
	if !o.Ours || hashed && entry.XXH3 == [16]byte{} {
		// Read by its SHA-256 (an index of before XXH3 was recorded):
		// the XXH3 of the same read is recorded now.
		s, err := sums()
		if err != nil {
			return nil, nil, false, err
		}
		entry.SHA256, entry.XXH3 = s.SHA256, s.XXH3
	}
	if !racy && prev != nil && prev == recorded && *prev == *entry {
		return nil, nil, false, nil // as recorded (what --verify finds of most files)
	}
	return nil, entry, racy, nil
}

// asRecorded reports a file that is exactly as its index entry records
// it, the desired content and mode included: what planFile would find
// with nothing to do and the entry standing as it is, decided without
// the observation's allocations (most files of a converged tree).
func asRecorded(env *Env, e source.Entry, le liveEntry, prev *index.Entry, intents []*index.Entry, ix *treeIndex) (bool, error) {
	if prev == nil || len(intents) > 0 || env.Verify || le.Stat != prev.Stat || le.Mode.Perm() != mirrorMode(e) || ix.racy(prev.Stat) {
		return false, nil
	}
	id, err := e.ID()
	return err == nil && id == prev.ContentID, err
}

// decide turns an entry's observation into its op; false when nothing is
// to be done.
func (op *treeOp) decide(o *diff.Observation) bool {
	op.action, op.reason = diff.Decide(o, diff.DefaultVerbs)
	if op.action == diff.NoOp {
		return false
	}
	op.replace = o.WrongType != ""
	op.backup = o.Exists && !o.Ours
	op.chmod = o.Exists && o.WrongType == "" && o.Matches
	return true
}
