package state

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// HostKeySize is the length of the per-host key, in bytes.
const HostKeySize = 32

// HostKeyFile is the per-host key's name in the state dir.
const HostKeyFile = "host.key"

// HostKey is the state dir's per-host secret: 32 random bytes in host.key,
// 0600, made on first use and never replaced. It keys the IDs of sensitive
// content and the fingerprints of secret files (HMAC-SHA256), so that
// state.json names a secret without letting anyone guess it offline.
// Losing it only makes the next sync see those IDs as changed.
func (d Dir) HostKey() ([]byte, error) {
	key, err := d.readHostKey()
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	h, err := d.Open(true)
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	defer h.Close()
	key = make([]byte, HostKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	// Written whole beside it, then linked into place: a racing creator's
	// key is never replaced, and nobody ever reads half a key.
	f, tmp, err := h.CreateTemp(HostKeyFile)
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	defer h.Remove(tmp)
	_, err = f.Write(key)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	if err := h.Link(tmp, HostKeyFile); errors.Is(err, fs.ErrExist) {
		return d.readHostKey()
	} else if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	if err := h.Sync(); err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	return key, nil
}

func (d Dir) readHostKey() ([]byte, error) {
	p := d.File(HostKeyFile)
	f, err := d.OpenFile(HostKeyFile, os.O_RDONLY|syscall.O_NONBLOCK, 0) // a fifo planted there does not block
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("host key %s is not a regular file", p)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("host key %s is readable by others (mode %04o); chmod 600 it", p, fi.Mode().Perm())
	}
	key, err := readAll(f)
	if err != nil {
		return nil, err
	}
	if len(key) != HostKeySize {
		return nil, fmt.Errorf("host key %s holds %d bytes, not %d; move it away and sync again (sensitive IDs are then keyed anew)", p, len(key), HostKeySize)
	}
	return key, nil
}
