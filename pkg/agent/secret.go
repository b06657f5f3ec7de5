package agent

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// maxSecretSize bounds what is read from a secret or token file.
const maxSecretSize = 64 << 10

// secretFile is a secret kept in a file, re-read whenever the file changes
// (a rotated secret takes effect without a restart). Its value never
// appears in an error or a log.
type secretFile struct {
	path string

	mu    sync.Mutex
	stamp fileStamp
	value []byte
}

// fileStamp tells whether a file changed since it was read; following
// symlinks, so a swapped mounted secret counts as a change.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime time.Time
}

func stampOf(fi os.FileInfo) fileStamp {
	s := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(st.Dev), st.Ino
		s.ctime = ctime(st)
	}
	return s
}

// newSecretFile reads path now, so that a missing or empty file is an
// error at startup; what names the option is the caller's to add.
func newSecretFile(path string) (*secretFile, error) {
	s := &secretFile{path: path}
	if _, err := s.get(); err != nil {
		return nil, err
	}
	return s, nil
}

// get is the current secret, re-read if the file changed. An unreadable or
// empty file is an error: the caller refuses the request rather than fall
// back to an old secret that may have been revoked.
func (s *secretFile) get() ([]byte, error) {
	fi, err := os.Stat(s.path)
	if err != nil {
		return nil, err
	}
	st := stampOf(fi)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.value != nil && st == s.stamp {
		return s.value, nil
	}
	f, err := os.Open(s.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSecretSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.path, err)
	}
	if len(data) > maxSecretSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", s.path, maxSecretSize)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		s.value = nil
		return nil, fmt.Errorf("%s: %w", s.path, errEmptySecret)
	}
	s.value, s.stamp = data, st
	return data, nil
}

var errEmptySecret = errors.New("empty")

// equalSecret compares in constant time; hashing first keeps the length of
// the secret from leaking through an early return on a length mismatch.
func equalSecret(got, want []byte) bool {
	a, b := sha256.Sum256(got), sha256.Sum256(want)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
