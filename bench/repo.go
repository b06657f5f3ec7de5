//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// bareRepo is a bare repository a benchmark serves and commits to: made
// from a checkout (git init, add, commit, clone --bare) or borrowing the
// objects of a generated data set's repository (clone --bare --shared),
// which it never writes to.
type bareRepo struct {
	dir string
	n   int // commits made
}

// newBareFromCheckout commits everything checkout holds and clones it bare
// to dir.
func newBareFromCheckout(checkout, dir string) (*bareRepo, error) {
	if _, err := os.Stat(filepath.Join(checkout, ".git")); err != nil {
		if err := commitAll(checkout); err != nil {
			return nil, err
		}
	}
	if err := git("clone", "-q", "--bare", checkout, dir); err != nil {
		return nil, err
	}
	return &bareRepo{dir: dir}, nil
}

// newBareShared makes dir a bare repository borrowing every object of
// from (a generated data set's repo.git): the commits the benchmark makes
// land in dir alone.
func newBareShared(from, dir string) (*bareRepo, error) {
	if err := git("clone", "-q", "--bare", "--shared", from, dir); err != nil {
		return nil, err
	}
	return &bareRepo{dir: dir}, nil
}

// read is the content of rel on main.
func (r *bareRepo) read(rel string) ([]byte, error) {
	out, err := exec.Command("git", "--git-dir", r.dir, "cat-file", "blob", "main:"+rel).Output()
	if err != nil {
		return nil, fmt.Errorf("git cat-file main:%s in %s: %v", rel, r.dir, err)
	}
	return out, nil
}

// commit makes a commit on main that changes rel to content, with git
// fast-import, which reads only the trees on rel's path: it costs the same
// on a tree of a million files as on ten.
func (r *bareRepo) commit(rel string, content []byte) error {
	r.n++
	var s bytes.Buffer
	msg := fmt.Sprintf("change %d", r.n)
	fmt.Fprintf(&s, "commit refs/heads/main\ncommitter b <b@b> %d +0000\ndata %d\n%s\nfrom refs/heads/main^0\n",
		time.Now().Unix(), len(msg), msg)
	fmt.Fprintf(&s, "M 100644 inline %s\ndata %d\n", rel, len(content))
	s.Write(content)
	s.WriteString("\ndone\n")
	cmd := exec.Command("git", "--git-dir", r.dir, "fast-import", "--quiet")
	cmd.Stdin = &s
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git fast-import in %s: %v: %s", r.dir, err, out)
	}
	return nil
}

// middleFile is a regular file in the middle of dir's tree, relative to
// dir: at each level the middle subdirectory, until one holds files, then
// its middle file. It reads one directory a level, whatever the tree's size.
func middleFile(dir string) (string, error) {
	rel := ""
	for {
		entries, err := os.ReadDir(filepath.Join(dir, rel))
		if err != nil {
			return "", err
		}
		var files, dirs []string
		for _, e := range entries {
			switch {
			case e.Type().IsRegular():
				files = append(files, e.Name())
			case e.IsDir():
				dirs = append(dirs, e.Name())
			}
		}
		switch {
		case len(dirs) > 0 && (len(files) < 8 || rel == ""):
			slices.Sort(dirs)
			rel = filepath.Join(rel, dirs[len(dirs)/2])
		case len(files) > 0:
			slices.Sort(files)
			return filepath.Join(rel, files[len(files)/2]), nil
		default:
			return "", fmt.Errorf("no file in %s", filepath.Join(dir, rel))
		}
	}
}

// fileCount is the regular files under dir, from the data set's INFO when
// dir is a generated kb/, else counted.
func fileCount(dir string) int {
	if b, err := os.ReadFile(filepath.Join(dir, "..", "..", "INFO")); err == nil && filepath.Base(dir) == "kb" {
		for l := range strings.SplitSeq(string(b), "\n") {
			var n int
			if _, err := fmt.Sscanf(l, "files %d", &n); err == nil {
				return n
			}
		}
	}
	return countFiles(dir)
}
