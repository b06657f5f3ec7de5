// Package state is the agent's memory on the host: the snapshot of what was
// last applied (state.json) and its serial, the lock that keeps two writers
// apart, backups, and the state dir's one door (Dir) that other packages
// keep their files behind (the tree indexes: pkg/index). Everything is
// written atomically, 0600 in a 0700 directory.
package state

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
)

// Version is the snapshot format this build writes. Format 2 added the
// checksum; a format 1 snapshot, which has none, still loads.
const Version = 2

// ErrCorruptSnapshot reports a state.json that is not a whole snapshot:
// garbage, truncated, empty, or changed since cortex-sync wrote it.
var ErrCorruptSnapshot = errors.New("snapshot is unreadable")

// errNewerSnapshot reports a snapshot written by a newer cortex-sync.
var errNewerSnapshot = errors.New("snapshot format is newer than this cortex-sync understands")

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
	// Creating lists the resources a sync was about to create, saved before
	// it touched the host: a sync killed after creating one and before
	// recording it leaves its name here, so the next sync still knows
	// cortex-sync made it (and prune may delete it).
	Creating []Creation `json:"creating,omitempty"`
	// RolledBack says why this snapshot was found older than the last one
	// its state dir wrote; it stays, saved after save, until the user
	// accepts the rollback, so no number of syncs launders it.
	RolledBack string `json:"rolledBack,omitempty"`
	// LastGood is the last revision known good (see revisions.go).
	LastGood *Known `json:"lastGood,omitempty"`
	// Pin holds the host on a revision other than its source's head: a
	// rollback, recorded before it changes anything.
	Pin *Pin `json:"pin,omitempty"`
	// History lists the revisions applied here, the newest last.
	History []Applied `json:"history,omitempty"`

	// ref is state.json's mtime: fingerprints as new are racily clean. It
	// is atomic because the agent saves while drivers judge.
	ref atomic.Int64
	// rollback is why this snapshot is older than the last one the state
	// dir wrote; nil when it is not.
	rollback error
}

// Rollback is nil, or an error wrapping ErrRollback saying how this
// snapshot is older than the last one this state dir wrote (state.serial):
// a backup put back, a copied state dir. Its inventory may name what
// cortex-sync no longer owns, so prune must not trust it until the user
// accepts it.
func (s *Snapshot) Rollback() error { return s.rollback }

// Racy reports whether a fingerprint may hide a change made in the same
// timestamp tick as it was taken (git's racy-clean rule).
func (s *Snapshot) Racy(fp hostfs.Stat) bool {
	ref := s.ref.Load()
	return ref == 0 || fp.Mtime >= ref || fp.Ctime >= ref
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
	// Vars is what a substituted resource was rendered from when applied.
	Vars *Rendered `json:"vars,omitempty"`
	// GeneratedBy names the resource that declared this one (the Directory
	// of a decrypted entry): while it is declared, this one leaving Git is
	// a deletion declared in Git, as a file gone from a mirror's source is.
	GeneratedBy string `json:"generatedBy,omitempty"`
}

// Rendered is what rendering a resource (substitute: true) used: the
// template's digest and each variable's, never a value (a secret's
// digest is keyed with the host key).
type Rendered struct {
	Template string            `json:"template"`
	Vars     map[string]string `json:"vars,omitempty"`
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

// WithInventory is a copy of the snapshot that holds only inv: a part of
// the inventory judged on its own.
func (s *Snapshot) WithInventory(inv []*Entry) *Snapshot {
	c := &Snapshot{Version: s.Version, Lineage: s.Lineage, Serial: s.Serial, Root: s.Root, Source: s.Source,
		Revision: s.Revision, LastAttempt: s.LastAttempt, LastSyncTime: s.LastSyncTime, Inventory: inv}
	c.ref.Store(s.ref.Load())
	c.Creating, c.RolledBack, c.rollback = s.Creating, s.RolledBack, s.rollback
	c.LastGood, c.Pin, c.History = s.LastGood, s.Pin, s.History
	return c
}

// Creation is a resource whose creation was under way.
type Creation struct {
	ID   string `json:"id"`
	Path string `json:"path,omitempty"`
}

// Intend adds creations about to start, and reports whether any was new
// (the snapshot must then be saved before they start).
func (s *Snapshot) Intend(cs []Creation) bool {
	added := false
	for _, c := range cs {
		if !slices.Contains(s.Creating, c) {
			s.Creating = append(s.Creating, c)
			added = true
		}
	}
	return added
}

// Intended reports whether a creation of id at path was under way, in this
// sync or one that was interrupted.
func (s *Snapshot) Intended(id, path string) bool {
	return slices.Contains(s.Creating, Creation{ID: id, Path: path})
}

// Settle forgets the creations that are now recorded in the inventory and
// those keep refuses (resources no longer desired).
func (s *Snapshot) Settle(keep func(id string) bool) {
	s.Creating = slices.DeleteFunc(s.Creating, func(c Creation) bool {
		return s.Find(c.ID) != nil || !keep(c.ID)
	})
	if len(s.Creating) == 0 {
		s.Creating = nil
	}
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

// snapshotFile is the snapshot's name in the state dir.
const snapshotFile = "state.json"

// Load reads the snapshot. A missing one is an empty snapshot with a fresh
// lineage; a damaged, truncated or empty one is an error wrapping
// ErrCorruptSnapshot, never silently replaced.
func (d Dir) Load() (*Snapshot, error) {
	data, err := d.ReadFile(snapshotFile)
	if errors.Is(err, fs.ErrNotExist) {
		return &Snapshot{Version: Version, Lineage: newLineage()}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	s, err := decodeSnapshot(data)
	if errors.Is(err, ErrCorruptSnapshot) {
		return nil, fmt.Errorf("%s: %w; restore it from a backup, or move it away to start afresh (cortex-sync then forgets what it applied)", d.File(snapshotFile), err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w; upgrade cortex-sync", d.File(snapshotFile), err)
	}
	if st, err := d.Lstat(snapshotFile); err == nil {
		s.ref.Store(st.Mtime)
	}
	if s.RolledBack == "" {
		s.RolledBack = d.checkSerial(s)
	}
	if s.RolledBack != "" {
		s.rollback = fmt.Errorf("%w: %s", ErrRollback, s.RolledBack)
	}
	return s, nil
}

// SetAside keeps a damaged state.json beside it as
// state.json.damaged-<time> and returns that name: the evidence is kept,
// and state.json stays in place (no reader finds none) until a save
// replaces it.
func (d Dir) SetAside() (string, error) {
	aside := snapshotFile + ".damaged-" + time.Now().UTC().Format("20060102T150405.000000000Z")
	h, err := d.Open(false)
	if err != nil {
		return "", err
	}
	defer h.Close()
	if err := h.Link(snapshotFile, aside); err != nil {
		return "", err
	}
	return d.File(aside).Path(), h.Sync()
}

// Save writes the snapshot atomically and durably, bumping its serial.
func (d Dir) Save(s *Snapshot) error {
	s.Serial++
	s.Version = Version
	if s.Lineage == "" {
		s.Lineage = newLineage() // never write a snapshot Load would refuse
	}
	data, err := encodeSnapshot(s)
	if err != nil {
		return fmt.Errorf("save snapshot: %w", err)
	}
	if err := d.WriteFile(snapshotFile, data); err != nil {
		return fmt.Errorf("save snapshot: %w", err)
	}
	if st, err := d.Lstat(snapshotFile); err == nil {
		s.ref.Store(st.Mtime)
	}
	if s.rollback != nil {
		// The high-water mark stays until the rollback is accepted: a sync
		// without --prune must not launder an old inventory.
		return nil
	}
	return d.writeSerial(s)
}

// sealed is state.json: the snapshot's fields and, beside them, a checksum
// over them.
type sealed struct {
	*Snapshot
	// Checksum is "sha256:" and the hex SHA-256 of the canonical encoding
	// of every other field; see checksum.
	Checksum string `json:"checksum,omitempty"`
}

func encodeSnapshot(s *Snapshot) ([]byte, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	fields, err := decodeObject(raw)
	if err != nil {
		return nil, err
	}
	sum, err := checksum(fields)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(sealed{Snapshot: s, Checksum: sum}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeSnapshot parses state.json. Anything but a whole snapshot, as
// written, is an error wrapping ErrCorruptSnapshot.
func decodeSnapshot(data []byte) (*Snapshot, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrCorruptSnapshot}, args...)...)
	}
	fields, err := decodeObject(data)
	if err != nil {
		return nil, corrupt("%v", err)
	}
	if fields == nil {
		return nil, corrupt("it holds null, not a snapshot")
	}
	s := &Snapshot{}
	file := sealed{Snapshot: s}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, corrupt("%v", err)
	}
	if s.Version > Version {
		return nil, fmt.Errorf("%w: format %d, this cortex-sync reads up to %d", errNewerSnapshot, s.Version, Version)
	}
	_, sealedFile := fields["checksum"]
	delete(fields, "checksum")
	if sealedFile {
		sum, err := checksum(fields)
		if err != nil {
			return nil, corrupt("%v", err)
		}
		if sum != file.Checksum {
			return nil, corrupt("checksum mismatch: it was damaged or edited after cortex-sync wrote it")
		}
	}
	switch {
	case s.Version < 1 && s.Lineage == "":
		return nil, corrupt("it has no format version and no lineage: it is empty, truncated, or not a snapshot")
	case s.Version < 1:
		return nil, corrupt("format version %d is not one cortex-sync wrote", s.Version)
	case s.Lineage == "":
		return nil, corrupt("it has no lineage")
	case !sealedFile && s.Version >= 2:
		return nil, corrupt("it has no checksum")
	}
	for i, e := range s.Inventory {
		if e == nil || e.ID == "" {
			return nil, corrupt("inventory entry %d has no id", i)
		}
	}
	return s, nil
}

// decodeObject decodes a JSON document that is one object, or null (nil),
// keeping numbers as written.
func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("it is empty")
		}
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not JSON: data after the top-level value")
	}
	m, ok := v.(map[string]any)
	if !ok && v != nil {
		return nil, fmt.Errorf("it holds a JSON %T, not a snapshot", v)
	}
	return m, nil
}

// checksum is "sha256:" and the SHA-256 of the canonical encoding of
// fields: compact JSON, object keys sorted, numbers as written, and only '"',
// '\\', control characters, U+2028 and U+2029 escaped. It depends on the JSON,
// not on Go types, so fields added later need no new rule. Anyone who must
// edit state.json by hand can reseal it in Python:
//
//	snap.pop("checksum")
//	body = json.dumps(snap, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
//	body = body.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
//	snap["checksum"] = "sha256:" + hashlib.sha256(body.encode()).hexdigest()
func checksum(fields map[string]any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		return "", err
	}
	sum := sha256.Sum256(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// syncClose makes what was written to f durable, then closes it; f is
// closed whatever fails.
func syncClose(f *os.File) error {
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// RemoveTemps deletes the temporary files killed writes left in the state
// dir (state.json's, the tree indexes', the source stat cache's, the host
// key's) and reports how many. A temp file whose writer still runs stays
// (hostfs.Abandoned): not every write into the state dir holds the state
// lock, and a state check beside a writer takes none.
func (d Dir) RemoveTemps() (int, error) {
	n := 0
	var errs []error
	for i, dir := range []Dir{d, d.Sub("trees"), d.Sub("cache")} {
		removed, err := dir.RemoveAbandoned()
		n += removed
		// Below the top, a sweep is housekeeping: a directory that cannot
		// be opened (a symlink planted there) is refused, named, by what
		// uses it, not by every taker of the lock.
		if err != nil && i == 0 {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// RemoveAbandoned deletes the temp files in d, not below it, whose writer
// is gone (hostfs.Abandoned), and reports how many: what a directory's
// owner does when it opens it. A missing d has none.
func (d Dir) RemoveAbandoned() (int, error) {
	h, err := d.Open(false)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer h.Close()
	return h.RemoveAbandoned()
}

// abandoned lists the temp files in d whose writer is gone.
func (d Dir) abandoned() []string {
	entries, _ := d.ReadDir()
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && hostfs.Abandoned(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names
}

func newLineage() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
