//go:build !linux

package state

import "os"

// unnamedFile is a new file in dir that is removed at once.
func unnamedFile(dir string) (*os.File, error) { return namedThenRemoved(dir) }
