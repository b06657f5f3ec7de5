//go:build !linux

package state

import "os"

// unnamedFile is a new file in dir that is removed at once.
func unnamedFile(dir Dir) (*os.File, error) {
	h, err := dir.Open(true)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return namedThenRemoved(h)
}
