package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrLocked reports that another process holds the state lock.
var ErrLocked = errors.New("state dir is locked")

// Lock is the exclusive lock on a state dir, held until Unlock.
type Lock struct {
	f    *os.File
	d    Dir
	name string // its file in d
}

// Holder is who holds a state dir's lock, as its holder wrote it into the
// lock file: so that the one kept waiting can say who it waits for.
type Holder struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"` // its command line, as ps shows it
	Since   time.Time `json:"since"`
}

// maxCommand bounds the command line kept in the lock file.
const maxCommand = 400

func thisHolder(now time.Time) Holder {
	cmd := strings.Join(os.Args, " ")
	if len(cmd) > maxCommand {
		cmd = cmd[:maxCommand] + "..."
	}
	return Holder{PID: os.Getpid(), Command: cmd, Since: now.UTC().Truncate(time.Second)}
}

// lockFile is the lock's name in the state dir.
const lockFile = "lock"

// readHolder reads the lock file's holder; ok is false when it names none
// (let go, or being written). A bare pid is what older versions wrote.
func (d Dir) readHolder(file string) (h Holder, ok bool) {
	data, err := d.ReadFile(file)
	if err != nil {
		return Holder{}, false
	}
	if json.Unmarshal(data, &h) == nil && h.PID > 0 {
		return h, true
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 0 {
		return Holder{PID: pid}, true
	}
	return Holder{}, false
}

// describe says who the holder is, for a message: its pid, command and
// since when.
func (h Holder) describe(now time.Time) string {
	s := "pid " + strconv.Itoa(h.PID)
	var more []string
	if h.Command != "" {
		more = append(more, h.Command)
	}
	if !h.Since.IsZero() {
		more = append(more, fmt.Sprintf("since %s, %s ago", h.Since.Format(time.RFC3339), now.Sub(h.Since).Round(time.Second)))
	}
	if len(more) > 0 {
		s += " (" + strings.Join(more, ", ") + ")"
	}
	return s
}

// Lock takes the state dir's lock, waiting up to timeout for another holder
// to let go. The error then says who holds it: pid, command, since when.
func (d Dir) Lock(ctx context.Context, timeout time.Duration) (*Lock, error) {
	l, err := d.lock(ctx, lockFile, timeout)
	if err != nil {
		return nil, err
	}
	// The one writer now: what a killed writer left half-written goes.
	if _, err := d.RemoveTemps(); err != nil {
		l.Unlock()
		return nil, fmt.Errorf("remove temp files in %s: %w", d, err)
	}
	return l, nil
}

// ErrAgentRuns reports that an agent already runs on the state dir.
var ErrAgentRuns = errors.New("another cortex-sync agent runs on this state dir")

// agentLockFile is held for an agent's life.
const agentLockFile = "agent.lock"

// LockAgent takes the state dir's agent lock, held for an agent's life:
// two agents on one state dir would each supervise and apply. It does not
// wait: the second one is refused, naming the first.
func (d Dir) LockAgent() (*Lock, error) {
	l, err := d.lock(context.Background(), agentLockFile, 0)
	if errors.Is(err, ErrLocked) {
		who := "an unknown process"
		if h, ok := d.readHolder(agentLockFile); ok {
			who = h.describe(time.Now())
		}
		return nil, fmt.Errorf("%w: %s; stop it, or give this one another --state-dir", ErrAgentRuns, who)
	}
	return l, err
}

// lock takes the flock on the state dir's file name, waiting up to
// timeout, and writes who holds it.
func (d Dir) lock(ctx context.Context, file string, timeout time.Duration) (*Lock, error) {
	name := d.File(file)
	f, err := d.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			who := "an unknown process"
			if h, ok := d.readHolder(file); ok {
				who = h.describe(time.Now())
			}
			return nil, fmt.Errorf("%w: %s is held by %s (waited %s; raise --lock-timeout or stop that process)", ErrLocked, name, who, timeout)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	rec, _ := json.Marshal(thisHolder(time.Now()))
	f.Truncate(0)
	f.WriteAt(append(rec, '\n'), 0)
	return &Lock{f: f, d: d, name: file}, nil
}

// Held reports whether the lock's file is still the one at its name. A
// flock holds a file, not a name: when the state dir is removed under its
// holder, the lock goes on being held on a file nobody else can open, and
// a second agent would take the lock of the new one.
func (l *Lock) Held() bool {
	var own unix.Stat_t
	if err := unix.Fstat(int(l.f.Fd()), &own); err != nil {
		return false
	}
	st, err := l.d.Lstat(l.name)
	return err == nil && st.Ino == own.Ino && own.Nlink > 0
}

// Retake takes the lock again on the file now at its name (made anew if
// it is gone), after Held said the one held is not there any more; the
// old one is let go. Someone who took it meanwhile is ErrLocked, and the
// old one stays held.
func (l *Lock) Retake() error {
	n, err := l.d.lock(context.Background(), l.name, 0)
	if err != nil {
		return err
	}
	l.f.Close()
	l.f = n.f
	return nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	l.f.Truncate(0)
	return l.f.Close() // closing the descriptor releases the flock
}
