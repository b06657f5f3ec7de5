package events

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

// The local event log: JSON lines in the state dir, one event a line,
// 0600. It is bounded: past MaxBytes, events.jsonl becomes events.1.jsonl
// (the one before is dropped) and a new events.jsonl begins, so the log
// never holds more than twice MaxBytes. One writer appends (the agent);
// readers (cortex-sync events, /api/v1/events) read both files and may
// follow the log across a rotation. A line torn by a crash is cut off
// when the writer opens the log again, and skipped by readers meanwhile.
const (
	LogFile    = "events.jsonl"   // the newest events
	LogOldFile = "events.1.jsonl" // the ones before, until the next rotation
	// DefaultLogMax is the size past which the log rotates: 4 MiB, about
	// 15,000 events a file.
	DefaultLogMax = 4 << 20
	// DefaultLogQueue is how many events wait for the writer before
	// Emit drops them.
	DefaultLogQueue = 1024
	// maxMessage bounds an event's message in the log, in bytes.
	maxMessage = 4096
)

// Files is where a log lives: a state dir (state.Dir), which keeps every
// open inside it.
type Files interface {
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	Rename(from, to string) error
}

// LogOptions tune a Log; zero fields take the defaults.
type LogOptions struct {
	MaxBytes int64 // per file; default DefaultLogMax
	Queue    int   // events waiting for the writer; default DefaultLogQueue
	// Dropped is called for each event dropped because the queue was
	// full (a metric counts them); it must not block.
	Dropped func()
	// Failed is called when a write fails (the event is lost); the
	// writer goes on with the next one.
	Failed func(error)
}

// Log is the writer of the local event log: a Sink whose Emit queues the
// event for a goroutine that appends it, so that telling never waits for
// the disk.
type Log struct {
	files Files
	opts  LogOptions
	queue chan Event
	done  chan struct{}

	mu     sync.RWMutex // Emit against Close
	closed bool

	// The writer's own.
	f    *os.File
	size int64
	buf  bytes.Buffer

	dropped atomic.Int64
}

// OpenLog opens the event log in files for appending, cutting off a line
// a crash left torn, and starts its writer; Close stops it.
func OpenLog(files Files, opts LogOptions) (*Log, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultLogMax
	}
	if opts.Queue <= 0 {
		opts.Queue = DefaultLogQueue
	}
	l := &Log{files: files, opts: opts, queue: make(chan Event, opts.Queue), done: make(chan struct{})}
	if err := l.open(); err != nil {
		return nil, err
	}
	go l.write()
	return l, nil
}

// open opens LogFile, 0600, and cuts what follows its last newline.
func (l *Log) open() error {
	f, err := l.files.OpenFile(LogFile, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	size, err := whole(f)
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, size
	return nil
}

// whole truncates f after its last newline (a line a crash tore) and
// returns its size then.
func whole(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	if size == 0 {
		return 0, nil
	}
	// Look back block by block for the last newline.
	end := size
	var block [4096]byte
	for end > 0 {
		n := min(int64(len(block)), end)
		if _, err := f.ReadAt(block[:n], end-n); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(block[:n], '\n'); i >= 0 {
			end = end - n + int64(i) + 1
			break
		}
		end -= n
	}
	if end == size {
		return size, nil
	}
	return end, f.Truncate(end)
}

// Emit queues e for the writer; with the queue full (or the log closed)
// it is dropped and counted.
func (l *Log) Emit(e Event) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return
	}
	select {
	case l.queue <- e:
	default:
		l.dropped.Add(1)
		if l.opts.Dropped != nil {
			l.opts.Dropped()
		}
	}
}

// Dropped is how many events Emit dropped.
func (l *Log) Dropped() int64 { return l.dropped.Load() }

// Close writes what is queued and closes the log.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	close(l.queue)
	l.mu.Unlock()
	<-l.done
	return l.f.Close()
}

// write appends queued events until the queue is closed.
func (l *Log) write() {
	defer close(l.done)
	for e := range l.queue {
		if err := l.append(e); err != nil && l.opts.Failed != nil {
			l.opts.Failed(err)
		}
	}
}

// append writes e as one line, in one write, rotating first when the line
// would take the file past MaxBytes.
func (l *Log) append(e Event) error {
	e.Message = clip(e.Message, maxMessage)
	l.buf.Reset()
	if err := json.NewEncoder(&l.buf).Encode(e); err != nil { // ends in a newline
		return err
	}
	if unlinked(l.f) { // the state dir was removed under the agent
		l.f.Close()
		if err := l.open(); err != nil {
			return err
		}
	}
	if l.size > 0 && l.size+int64(l.buf.Len()) > l.opts.MaxBytes {
		if err := l.rotate(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(l.buf.Bytes())
	l.size += int64(n)
	return err
}

// unlinked says whether f's file was removed.
func unlinked(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}

// rotate makes the log the old one and begins a new one.
func (l *Log) rotate() error {
	if err := l.files.Rename(LogFile, LogOldFile); err != nil {
		return err
	}
	l.f.Close()
	return l.open()
}

// clip cuts s to at most n bytes, on a rune boundary, saying so.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "…"
	cut := n - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

// Read returns the log's events at or after since (zero: all of them),
// oldest first. A line that does not parse (torn by a crash, or half
// written as it is read) is skipped. A state dir without a log has no
// events.
func Read(files Files, since time.Time) ([]Event, error) {
	var out []Event
	err := Follow(context.Background(), files, since, 0, func(e Event) error {
		out = append(out, e)
		return nil
	})
	return out, err
}

// Follow calls each for every event at or after since, oldest first; with
// poll > 0 it then waits for more, looking every poll, and follows the log
// across rotations until ctx ends (returning nil) or each fails (returning
// its error); a follower that falls more than a whole file behind loses
// what was rotated away. With poll 0 it returns once it read what is
// there.
func Follow(ctx context.Context, files Files, since time.Time, poll time.Duration, each func(Event) error) error {
	// The newest file first: a rotation between the two opens then leaves
	// the old file the same as the newest, read once, rather than an
	// events.jsonl never read.
	cur, err := openRead(files, LogFile)
	if err != nil {
		return err
	}
	old, err := openRead(files, LogOldFile)
	if err != nil {
		closeFile(cur)
		return err
	}
	t := &tail{since: since, each: each}
	if old != nil && !sameFile(old, cur) {
		err = t.drain(old)
		t.partial = nil // a torn last line of the old file
	}
	closeFile(old)
	defer func() { closeFile(cur) }()
	if err != nil {
		return err
	}
	if cur != nil {
		if err := t.drain(cur); err != nil {
			return err
		}
	}
	if poll <= 0 {
		return nil
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if cur != nil {
			if err := t.drain(cur); err != nil {
				return err
			}
		}
		// Rotated (or made, when there was none): the rest of the file
		// held is read above; the new one from its start.
		next, err := openRead(files, LogFile)
		if err != nil {
			return err
		}
		if next == nil || cur != nil && sameFile(next, cur) {
			closeFile(next)
			continue
		}
		if cur != nil {
			if err := t.drain(cur); err != nil {
				closeFile(next)
				return err
			}
			// Rotated twice since the last look: the file between is the
			// old one now, read whole before the newest.
			between, err := openRead(files, LogOldFile)
			if err == nil && between != nil && !sameFile(between, cur) && !sameFile(between, next) {
				t.partial = nil
				err = t.drain(between)
			}
			closeFile(between)
			closeFile(cur)
			if err != nil {
				closeFile(next)
				return err
			}
		}
		cur, t.partial = next, nil
		if err := t.drain(cur); err != nil {
			return err
		}
	}
}

// tail reads whole lines from a file as it grows.
type tail struct {
	since   time.Time
	each    func(Event) error
	partial []byte // a line not ended yet
}

// drain reads f from where it was left to its end, handing on each whole
// line that parses.
func (t *tail) drain(f *os.File) error {
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 {
			if line[len(line)-1] != '\n' {
				t.partial = append(t.partial, line...)
			} else {
				if len(t.partial) > 0 {
					line = append(t.partial, line...)
					t.partial = nil
				}
				if e, ok := parse(line); ok && !e.Time.Before(t.since) {
					if err := t.each(e); err != nil {
						return err
					}
				}
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			// A line longer than the buffer: kept whole in partial.
		case errors.Is(err, io.EOF):
			return nil
		default:
			return err
		}
		if len(t.partial) > 1<<20 {
			t.partial = nil // no event is this long: not a line of ours
		}
	}
}

func parse(line []byte) (Event, bool) {
	var e Event
	if err := json.Unmarshal(line, &e); err != nil || e.Reason == "" {
		return Event{}, false
	}
	return e, true
}

// openRead opens name for reading; nil, and no error, when it is missing.
func openRead(files Files, name string) (*os.File, error) {
	f, err := files.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return f, err
}

func sameFile(a, b *os.File) bool {
	if a == nil || b == nil {
		return false
	}
	ai, err := a.Stat()
	if err != nil {
		return false
	}
	bi, err := b.Stat()
	return err == nil && os.SameFile(ai, bi)
}

func closeFile(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// ParseSince reads a --since or ?since= value: a duration back from now
// ("1h", "90s") or a time (RFC 3339, or a date, 2006-01-02).
func ParseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, errors.New("since " + s + ": a duration back from now is positive (1h, 30m)")
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("since " + s + ": not a duration (1h, 30m) or a time (2006-01-02T15:04:05Z07:00, 2006-01-02)")
}
