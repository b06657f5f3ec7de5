package supervise

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// LookPath finds a program in the PATH of the environment it will run
// with, not the caller's.
func LookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, dir := range filepath.SplitList(p) {
				full := filepath.Join(dir, name)
				if fi, err := os.Stat(full); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
					return full, nil
				}
			}
		}
	}
	return "", exec.ErrNotFound
}
