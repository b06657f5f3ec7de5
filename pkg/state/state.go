// Package state is the agent's memory on the host: the snapshot of what was
// last applied (state.json), per-tree fingerprint indexes, and the lock that
// keeps two writers apart. Everything is written atomically, 0600 in a 0700
// directory.
package state

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// Version is the snapshot format this build writes.
const Version = 1

// Snapshot is state.json.
type Snapshot struct {
	Version int    `json:"version"`
	Lineage string `json:"lineage"` // fixed for the life of a state dir
	Serial  uint64 `json:"serial"`  // bumped on every save
	Root    string `json:"root"`    // the --root it was applied under
	Source  Source `json:"source"`
	// Revision is the last revision applied in full.
	Revision string `json:"revision,omitempty"`
	// LastAttempt is the last sync that ran, failed or not.
	LastAttempt *Attempt `json:"lastAttempt,omitempty"`
	// LastSyncTime is when the last sync finished; zero before the first.
	LastSyncTime time.Time `json:"lastSyncTime,omitzero"`
	// Inventory is every resource cortex-sync applied and has not pruned.
	Inventory []*Entry `json:"inventory"`

	ref int64 // state.json's mtime: fingerprints as new are racily clean
}

// Racy reports whether a fingerprint may hide a change made in the same
// timestamp tick as it was taken (git's racy-clean rule).
func (s *Snapshot) Racy(fp hostfs.Stat) bool {
	return s.ref == 0 || fp.Mtime >= s.ref || fp.Ctime >= s.ref
}

// Source says where desired state came from.
type Source struct {
	Type string `json:"type"` // "dir" or "git"
	URL  string `json:"url"`  // directory or repository URL
	Path string `json:"path"` // manifests' path inside it
}

// Entry is one applied resource.
type Entry struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Path     string `json:"path,omitempty"`
	SpecHash string `json:"specHash"`
	// Spec is the spec as applied (content is named by ContentID, never
	// stored), so status can judge the host without a source.
	Spec        json.RawMessage   `json:"spec,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// DependsOn is what the resource came after when last applied
	// (explicit and implied), so a prune can stop dependents first.
	DependsOn []string `json:"dependsOn,omitempty"`
	// ContentID is the desired content as the source named it (a blob ID, a
	// digest), so a change in Git is seen without re-hashing.
	ContentID string `json:"contentID,omitempty"`
	// Target is a symlink's target as cortex-sync last pointed it.
	Target string `json:"target,omitempty"`
	// Live is the fingerprint of what was written, taken after rename and chmod.
	Live *Fingerprint `json:"live,omitempty"`
	// Created is false for an object that existed before cortex-sync took it over.
	Created bool `json:"created"`
	// NoPrune mirrors the cortex-sync/prune: disabled annotation.
	NoPrune bool `json:"noPrune,omitempty"`
	// Extra is kind-specific state (a process's pid, a tree's file count).
	Extra json.RawMessage `json:"extra,omitempty"`
	// Result of the last apply.
	Result *Result `json:"result,omitempty"`
}

// Fingerprint is a stat plus the SHA-256 of the content, when there is one.
type Fingerprint struct {
	hostfs.Stat
	SHA256 string `json:"sha256,omitempty"`
}

// Result is the outcome of the last apply of a resource.
type Result struct {
	Action string    `json:"action"`
	Error  string    `json:"error,omitempty"`
	Time   time.Time `json:"time"`
}

// Find returns the entry with the given ID.
func (s *Snapshot) Find(id string) *Entry {
	for _, e := range s.Inventory {
		if e.ID == id {
			return e
		}
	}
	return nil
}

// Put replaces or adds an entry.
func (s *Snapshot) Put(e *Entry) {
	for i, old := range s.Inventory {
		if old.ID == e.ID {
			s.Inventory[i] = e
			return
		}
	}
	s.Inventory = append(s.Inventory, e)
}

// Drop removes the entry with the given ID.
func (s *Snapshot) Drop(id string) {
	for i, e := range s.Inventory {
		if e.ID == id {
			s.Inventory = append(s.Inventory[:i], s.Inventory[i+1:]...)
			return
		}
	}
}

// Dir is a state directory.
type Dir struct {
	Path string
}

// DefaultDir is /var/lib/cortex-sync for root, else $XDG_STATE_HOME/cortex-sync.
func DefaultDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/cortex-sync"
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "cortex-sync")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "cortex-sync")
}

func (d Dir) file() string { return filepath.Join(d.Path, "state.json") }

// Sub is a subdirectory of the state dir (cache, backups, logs, trees).
func (d Dir) Sub(name string) string { return filepath.Join(d.Path, name) }

// Load reads the snapshot. A missing one is an empty snapshot with a fresh
// lineage; a corrupt one is an error, never silently replaced.
func (d Dir) Load() (*Snapshot, error) {
	data, err := os.ReadFile(d.file())
	if errors.Is(err, fs.ErrNotExist) {
		return &Snapshot{Version: Version, Lineage: newLineage()}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	s := &Snapshot{}
	if fi, err := os.Stat(d.file()); err == nil {
		s.ref = fi.ModTime().UnixNano()
	}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("snapshot %s is unreadable (%v); move it away to start afresh", d.file(), err)
	}
	if s.Version > Version {
		return nil, fmt.Errorf("snapshot %s has format %d, newer than this cortex-sync understands (%d)", d.file(), s.Version, Version)
	}
	return s, nil
}

// Save writes the snapshot atomically and durably, bumping its serial.
func (d Dir) Save(s *Snapshot) error {
	s.Serial++
	s.Version = Version
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return err
	}
	if err := WriteFile(d.file(), buf.Bytes()); err != nil {
		return fmt.Errorf("save snapshot: %w", err)
	}
	if fi, err := os.Stat(d.file()); err == nil {
		s.ref = fi.ModTime().UnixNano()
	}
	return nil
}

// WriteFile writes data to path atomically (temp, fsync, rename, fsync dir),
// 0600 in a 0700 directory.
func WriteFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func newLineage() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
