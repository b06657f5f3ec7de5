//go:build linux

package supervise

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// dirLock makes a supervisor the only one of its state dir. It is two
// locks, taken together or not at all: procs/.lock, flocked (what every
// release of cortex-sync takes), and an abstract unix socket named after
// the procs directory, bound. The socket is no file: it goes with the
// process that holds it and with nothing else, so it still holds while the
// state dir is removed under the supervisor, when a starter that finds no
// procs/.shim starts another supervisor: that one finds the name taken and
// waits for the first to make the state dir again.
type dirLock struct {
	procs string
	sock  int // -1 while not held
	file  *os.File
}

func newDirLock(procs string) *dirLock { return &dirLock{procs: procs, sock: -1} }

// try takes both locks if no one holds either: false when someone does.
func (l *dirLock) try() (bool, error) {
	if l.sock < 0 {
		fd, err := bindName(l.procs)
		if errors.Is(err, unix.EADDRINUSE) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("lock %s: %w", l.procs, err)
		}
		l.sock = fd
	}
	if ok, err := l.tryFile(); !ok {
		l.Close()
		return false, err
	}
	return true, nil
}

// tryFile flocks procs/.lock, a new one after the state dir was made
// again (the socket still held).
func (l *dirLock) tryFile() (bool, error) {
	name := filepath.Join(l.procs, lockFile)
	f, err := openFile(name, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return false, fmt.Errorf("lock %s: %w", name, err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("lock %s: %w", name, err)
	}
	if l.file != nil {
		l.file.Close() // the lock of a procs dir that is gone
	}
	l.file = f
	return true, nil
}

// Close lets go of both locks.
func (l *dirLock) Close() {
	if l.file != nil {
		l.file.Close()
		l.file = nil
	}
	if l.sock >= 0 {
		unix.Close(l.sock)
		l.sock = -1
	}
}

// bindName binds the abstract socket that names procs' supervisor; close
// on exec, so no process it starts holds it.
func bindName(procs string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	h := sha256.Sum256([]byte(procs))
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@cortex-sync/supervisor/" + hex.EncodeToString(h[:16])}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
