package driver

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
)

// hashFile is the SHA-256 of an entry's content, as the fingerprint keeps it.
func hashFile(d *hostfs.Dir, name string, size int64) (string, error) {
	sums, err := d.HashFile(name, size)
	return sums.SHA256, err
}

// unchanged reports whether the live file still holds what the fingerprint
// recorded: the quick stat check first, a hash only when the stat moved, the
// timestamps are racily close to the record, or verify asks for it. Under
// verify a file whose stat is the one recorded is read by its XXH3 where
// the fingerprint has one and fast reads it (as rsync -c reads a file), a
// changed one by its SHA-256 as ever: nothing is trusted less than without
// verify, where that file is not read at all.
func unchanged(live hostfs.Stat, fp *index.Entry, racy, verify bool, hash func() (string, error), fast func() ([16]byte, error)) (bool, error) {
	if fp == nil || !live.Mode.IsRegular() {
		return false, nil
	}
	if live.Same(fp.Stat) && !racy {
		switch {
		case !verify:
			return true, nil
		case fast != nil && fp.XXH3 != [16]byte{}:
			sum, err := fast()
			return sum == fp.XXH3, err
		}
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
