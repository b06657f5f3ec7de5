package supervise

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// DefaultLogMax is the size at which a log is rotated to one ".1" copy.
const DefaultLogMax = 10 << 20

// A process writes its output straight to its log file, opened O_APPEND:
// it never depends on the supervisor being alive to take it. The
// supervisor caps the file: past its maximum size, it is copied to
// "<log>.1" and truncated in place (logrotate's copytruncate), so the
// process's descriptor stays valid and O_APPEND writes go on at the new
// end. What is written between the copy and the truncate is lost; the
// window is a few microseconds.

// openLog opens a log for appending, making it and the logs directory if
// needed (confine.go: a symlink there is refused).
func openLog(path string) (*os.File, error) {
	return openFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND)
}

// CapLog rotates path, a log in a state dir (Files), when it has grown
// past max bytes; a symlink there is left alone.
func CapLog(path string, max int64) error {
	if max <= 0 {
		max = DefaultLogMax
	}
	d, name := door(path)
	return d.CapLog(name, max)
}

// ReadLog reads a log in a state dir (Files) whole: logs are capped.
func ReadLog(path string) ([]byte, error) { return readFile(path) }

// logLine writes one of the supervisor's own lines, timestamped, to a log.
func logLine(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "%s cortex-sync: %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), fmt.Sprintf(format, args...))
}

// Tail is the last n lines of a log (fewer when it holds fewer), read
// from at most its last 64 KiB.
func Tail(path string, n int) ([]string, error) {
	f, err := openFile(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	const window = 64 << 10
	off := max(0, fi.Size()-window)
	b := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		return nil, err
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:] // a partial first line
		}
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil, nil
	}
	if n >= 0 && len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, nil
}

// Follow copies what is appended to path, a log in a state dir (Files), to
// w from offset from, until ctx ends; a log that shrank (rotated) is
// followed from its start.
func Follow(ctx context.Context, path string, from int64, w io.Writer) error {
	buf := make([]byte, 32<<10)
	off := from
	for {
		f, err := openFile(path, os.O_RDONLY)
		if errors.Is(err, state.ErrSymlink) {
			return err // planted while followed
		}
		if err == nil {
			fi, serr := f.Stat()
			if serr == nil && fi.Size() < off {
				off = 0 // truncated by a rotation
			}
			for {
				n, rerr := f.ReadAt(buf, off)
				if n > 0 {
					if _, err := w.Write(buf[:n]); err != nil {
						f.Close()
						return err
					}
					off += int64(n)
				}
				if rerr != nil || n == 0 {
					break
				}
			}
			f.Close()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}
