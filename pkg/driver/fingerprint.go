package driver

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// hashFile is the SHA-256 of an entry's content, as the fingerprint keeps it.
func hashFile(d *hostfs.Dir, name string, size int64) (string, error) {
	return d.HashFile(name, size)
}

// unchanged reports whether the live file still holds what the fingerprint
// recorded: the quick stat check first, a hash only when the stat moved, the
// timestamps are racily close to the record, or verify asks for it.
func unchanged(live hostfs.Stat, fp *state.IndexEntry, racy, verify bool, hash func() (string, error)) (bool, error) {
	if fp == nil || !live.Mode.IsRegular() {
		return false, nil
	}
	if live.Same(fp.Stat) && !racy && !verify {
		return true, nil
	}
	if live.Size != fp.Size {
		return false, nil
	}
	sum, err := hash()
	return sum == fp.SHA256, err
}

// missing reports a path error that means "not there": the path or one of
// its parents does not exist, or a parent is not a directory.
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR)
}
