package state

import (
	"context"
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
type Lock struct{ f *os.File }

// Lock takes the state dir's lock, waiting up to timeout for another holder
// to let go. The error then names the holder's pid.
func (d Dir) Lock(ctx context.Context, timeout time.Duration) (*Lock, error) {
	if err := os.MkdirAll(d.Path, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	name := d.Sub("lock")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
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
			holder, _ := os.ReadFile(name)
			f.Close()
			pid := strings.TrimSpace(string(holder))
			if pid == "" {
				pid = "unknown"
			}
			return nil, fmt.Errorf("%w: %s is held by pid %s (waited %s; raise --lock-timeout or stop that process)", ErrLocked, name, pid, timeout)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	// The one writer now: what a killed writer left half-written goes.
	if _, err := d.RemoveTemps(); err != nil {
		f.Close()
		return nil, fmt.Errorf("remove temp files in %s: %w", d.Path, err)
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	l.f.Truncate(0)
	return l.f.Close() // closing the descriptor releases the flock
}
