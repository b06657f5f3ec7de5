// Package progress reports long operations — a first fetch, a large tree
// written — to whoever watches: a bar on a terminal's stderr, nothing
// otherwise. The engine calls Start with its context; the command decides,
// once, whether anyone is watching.
package progress

import (
	"context"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Task counts the steps of one operation.
type Task interface {
	// Add counts n more steps done.
	Add(n int)
	// Done ends the task; its bar is cleared.
	Done()
}

// Reporter starts tasks.
type Reporter interface {
	// Start begins a task of total steps; total < 0 when unknown.
	Start(desc string, total int64) Task
}

type key struct{}

// With returns ctx carrying r: the operations below it report to r.
func With(ctx context.Context, r Reporter) context.Context {
	return context.WithValue(ctx, key{}, r)
}

// Start begins a task on ctx's reporter; without one the task does nothing.
func Start(ctx context.Context, desc string, total int64) Task {
	if r, ok := ctx.Value(key{}).(Reporter); ok {
		return r.Start(desc, total)
	}
	return nop{}
}

// None is a task that reports nothing: for work too small for a bar.
var None Task = nop{}

type nop struct{}

func (nop) Add(int) {}
func (nop) Done()   {}

// Lines is an io.Writer for a task of unknown length that shows the last
// line written to it, such as a Git server's "Counting objects: 45%": a
// spinner that says what the other side is doing. It is nil when nobody
// watches, so that the other side is not asked to report at all.
func Lines(ctx context.Context, desc string) io.WriteCloser {
	r, ok := ctx.Value(key{}).(Reporter)
	if !ok {
		return nil
	}
	t := r.Start(desc, -1)
	lw := &lines{task: t}
	if b, ok := t.(*bar); ok {
		lw.describe = func(s string) { b.pb.Describe(desc + ": " + s) }
	}
	return lw
}

type lines struct {
	task     Task
	describe func(string)
	mu       sync.Mutex
	partial  []byte
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	// A server redraws its line with \r and ends it with \n: the last whole
	// one of either is the news.
	if i := strings.LastIndexAny(string(l.partial), "\r\n"); i >= 0 {
		line := strings.TrimSpace(string(l.partial[:i]))
		if j := strings.LastIndexAny(line, "\r\n"); j >= 0 {
			line = strings.TrimSpace(line[j+1:])
		}
		l.partial = append(l.partial[:0], l.partial[i+1:]...)
		if line != "" && l.describe != nil {
			l.describe(line)
		}
	}
	l.task.Add(1)
	return len(p), nil
}

func (l *lines) Close() error {
	l.task.Done()
	return nil
}

// Bars draws a bar per task on w, a terminal: throttled, cleared when the
// task ends, so what stays on the screen is the command's own output.
func Bars(w io.Writer) Reporter { return bars{w: w} }

type bars struct{ w io.Writer }

func (b bars) Start(desc string, total int64) Task {
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(b.w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetPredictTime(total > 0),
		progressbar.OptionSetElapsedTime(total > 0),
	}
	if total > 0 {
		opts = append(opts, progressbar.OptionShowCount())
	}
	return &bar{pb: progressbar.NewOptions64(total, opts...)}
}

type bar struct{ pb *progressbar.ProgressBar }

func (b *bar) Add(n int) { b.pb.Add(n) }
func (b *bar) Done()     { b.pb.Finish() }
