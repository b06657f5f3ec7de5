package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// openRoot opens --root, saying plainly when it is missing or not a
// directory: cortex-sync creates paths inside the root, never the root
// itself, so a typo cannot scatter a host's files into a new directory.
func openRoot(dir string, allowed []string) (*hostfs.Root, error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("--root %s: no such directory; create it first, or check the path", dir)
	case err == nil && !st.IsDir():
		return nil, fmt.Errorf("--root %s: not a directory", dir)
	}
	return hostfs.Open(dir, allowed)
}
