package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// checkRoot says plainly when --root is missing or not a directory:
// cortex-sync creates paths inside the root, never the root itself, so a
// typo cannot scatter a host's files into a new directory.
func checkRoot(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--root %s: no such directory; create it first, or check the path", dir)
	case err == nil && !st.IsDir():
		return fmt.Errorf("--root %s: not a directory", dir)
	}
	return nil
}
