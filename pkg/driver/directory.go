package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// DirectorySpec is a Directory's desired state: a directory, optionally a
// mirror of a repository directory (the knowledge-base case).
type DirectorySpec struct {
	resource.Base `yaml:",inline"`
	Path          string          `yaml:"path" json:"path"`
	Mode          *resource.Mode  `yaml:"mode" json:"mode,omitempty"`
	Owner         string          `yaml:"owner" json:"owner,omitempty"`
	Group         string          `yaml:"group" json:"group,omitempty"`
	Ensure        resource.Ensure `yaml:"ensure" json:"ensure,omitempty"`
	// Source is a repository directory to mirror, file by file.
	Source string `yaml:"source" json:"source,omitempty"`
	// Purge deletes entries inside that nothing manages.
	Purge bool `yaml:"purge" json:"purge,omitempty"`
	// Decrypt "sops": each SOPS-encrypted file of the source is a File of
	// its own that holds its plaintext (see dirsops.go); the mirror
	// leaves them out.
	Decrypt string `yaml:"decrypt" json:"decrypt,omitempty"`

	sourcePath string
	rendered   map[string]string // substitute: true: each file's rendered text, by repository path
	encrypted  []encryptedEntry  // decrypt: sops: the source's encrypted files
}

// Validate checks the Directory's fields.
func (s *DirectorySpec) Validate(v *resource.Validation) {
	defer s.substitute(v)
	v.AbsPath("spec.path", s.Path)
	s.Ensure.Validate(v, "spec.ensure")
	if s.Source != "" && !s.Ensure.Absent() {
		s.sourcePath = v.SourcePath("spec.source", s.Source, true)
	}
	validDecrypt(v, "spec.decrypt", s.Decrypt)
	switch {
	case s.Decrypt == "" || s.Ensure.Absent():
	case s.Source == "":
		v.Errorf("spec.decrypt", "decrypts the encrypted files of a source; give spec.source")
	case s.Substitute:
		v.Errorf("spec.decrypt", "a Directory cannot both decrypt and substitute; render the secrets into a File with substitute: true")
	case s.sourcePath != "":
		s.findEncrypted(v)
	}
}

// Claims is the directory, and everything below it when mirrored. One that
// neither mirrors, purges nor deletes keeps what lies below it.
func (s *DirectorySpec) Claims() []resource.Claim {
	return []resource.Claim{{Field: "spec.path", Path: s.Path, Tree: s.Source != "", Keeps: !s.tracksContent() && !s.Ensure.Absent()}}
}

func (s *DirectorySpec) tracksContent() bool { return s.Source != "" || s.Purge }

func init() {
	Register("Directory", func() resource.Spec { return &DirectorySpec{} }, directoryDriver{})
}

// recall derives the repository path a recalled spec mirrors.
func (s *DirectorySpec) recall() { s.sourcePath = s.Source }

type directoryDriver struct{}

type dirWork struct {
	attrs attrs
	ops   []treeOp
	index *index.Index // the tree's index, updated in place as entries are checked and written
	// replan: the tree's changes were too many to hold as ops; sync plans
	// it again, from its index as saved, as it writes it (writeTree).
	replan bool
	writes int // files to write, for progress
}

func treeIndexFile(env *Env, id string) state.File {
	return env.State.File("trees/" + strings.ReplaceAll(id, "/", ".") + ".idx")
}

func (directoryDriver) Observe(ctx context.Context, env *Env, r *resource.Resource, rec *state.Entry) (*diff.Change, error) {
	var spec *DirectorySpec
	p := ""
	if r != nil {
		spec = r.Spec.(*DirectorySpec)
		p = spec.Path
		env = spec.sourceEnv(env)
	}
	p = pathOf(p, rec)
	c := &diff.Change{Path: p}
	d, base, live, err := lstat(env, p)
	if err != nil {
		return nil, err
	}
	if d != nil {
		defer d.Close()
	}
	var old *index.Index
	if rec != nil {
		old, err = index.Load(treeIndexFile(env, rec.ID))
	} else {
		// Not recorded: a new index, or what a write of the tree that ran
		// since left.
		old, err = index.LoadUnrecorded(treeIndexFile(env, string(r.ID())))
	}
	if err != nil {
		return nil, err
	}
	o := &c.Observed
	o.Recorded, o.Exists = rec != nil, live != nil
	if live != nil && !live.Mode.IsDir() {
		o.WrongType = typeName(live.Mode)
	}
	w := &dirWork{index: old}
	c.Work = w
	var top *hostfs.Dir
	if live != nil && o.WrongType == "" {
		if top, err = d.OpenDir(base); err != nil {
			return nil, err
		}
		defer top.Close()
	}
	if spec == nil || spec.Ensure.Absent() {
		o.Declared = spec != nil
		if top != nil && !o.Declared {
			// A prune deletes what cortex-sync wrote: count it, and what
			// was changed since and is backed up first.
			if c.Files, err = pruneTree(env, top, old, w); err != nil {
				return nil, err
			}
		}
		return c, nil
	}
	o.Desired = true
	if w.attrs, err = wantAttrs(spec.Mode, spec.Owner, spec.Group); err != nil {
		return nil, err
	}
	o.GitChanged = rec == nil || rec.SpecHash != specHash(r)
	o.Matches, o.Ours = true, true
	switch {
	case live == nil:
		o.Attrs = w.attrs.diffs(nil)
	case o.WrongType != "":
		c.Attrs = []diff.Attr{{Field: "type", Before: o.WrongType, After: "directory"}}
	default:
		o.Attrs = w.attrs.diffs(live)
	}
	if spec.tracksContent() {
		t, err := planTree(ctx, env, r, spec, top, newTreeIndex(old), nil)
		if err != nil {
			return nil, err
		}
		c.Files, w.ops, w.writes = t.files, t.ops, t.writes
		o.Stale = w.index.Dirty()
		if t.ops == nil && len(t.files) > 0 {
			w.replan, w.index = true, nil
		}
	}
	return c, nil
}

// changes: a mirror whose spec is the same and whose source tells which
// of its entries changed (Git tree IDs) names those.
func (directoryDriver) changes(env *Env, old source.Tree, prev, r *resource.Resource, limit int) ([]string, bool) {
	spec, was := r.Spec.(*DirectorySpec), prev.Spec.(*DirectorySpec)
	if !spec.tracksContent() || spec.sourcePath == "" || spec.sourcePath != was.sourcePath || specHash(prev) != specHash(r) || env.recalled() || spec.rendered != nil || spec.encrypted != nil {
		return nil, false
	}
	d, ok := env.Tree.(source.Differ)
	if !ok {
		return nil, false
	}
	paths, ok, err := d.Changes(old, spec.sourcePath, limit)
	if err != nil || !ok {
		return nil, false
	}
	return paths, true
}

// dirExtra is what the snapshot keeps of a directory beyond its record.
type dirExtra struct {
	Files int `json:"files"`
}

func (directoryDriver) Apply(ctx context.Context, env *Env, c *diff.Change) (*state.Entry, error) {
	w, o := c.Work.(*dirWork), &c.Observed
	if c.Action == diff.Delete {
		if err := deleteTree(env, c, w); err != nil {
			return nil, err
		}
		return nil, w.index.Remove() // what it recorded is gone
	}
	spec := c.Desired.Spec.(*DirectorySpec)
	if spec.Ensure.Absent() {
		return nil, nil // absent already: nothing to record
	}
	env = spec.sourceEnv(env)
	d, base, err := env.Root.Parent(spec.Path, true)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if o.WrongType != "" {
		if _, err := env.Backups.Save(d, base); err != nil {
			return nil, err
		}
		if err := d.RemoveAll(base); err != nil {
			return nil, err
		}
	}
	setAttrs := len(o.Attrs) > 0
	if !o.Exists || o.WrongType != "" {
		if err := d.Mkdir(base, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		setAttrs = w.attrs.mode != 0 || w.attrs.uid >= 0 || w.attrs.gid >= 0
	}
	if setAttrs {
		st, err := d.Lstat(base)
		if err != nil {
			return nil, err
		}
		if err := d.SetAttrs(base, w.attrs.host(st.Mode.Perm())); err != nil {
			return nil, err
		}
	}
	top, err := d.OpenDir(base)
	if err != nil {
		return nil, err
	}
	defer top.Close()
	switch {
	case w.replan:
		load := index.LoadUnrecorded
		if c.Record != nil {
			load = index.Load
		}
		if w.index, err = load(treeIndexFile(env, string(c.ID))); err != nil {
			return nil, err
		}
		if err := writeTree(ctx, env, c.Desired, spec, top, w); err != nil {
			return nil, err
		}
	case len(w.ops) > 0:
		if err := applyTree(ctx, env, spec, top, w); err != nil {
			return nil, err
		}
	}
	if spec.tracksContent() && (w.index.Dirty() || c.Record == nil) {
		if err := w.index.Save(treeIndexFile(env, string(c.ID))); err != nil {
			return nil, err
		}
		// The intents are judged now; until the snapshot records the
		// tree, an empty intent log says its index is this one.
		if err := w.index.ClearIntents(c.Record != nil); err != nil {
			return nil, err
		}
	}
	if err := d.Sync(); err != nil {
		return nil, err
	}
	st, err := d.Lstat(base)
	if err != nil {
		return nil, err
	}
	e := newEntry(c.Desired, spec.Path)
	e.Live = &state.Fingerprint{Stat: st}
	e.Created = !o.Exists || (c.Record != nil && c.Record.Created)
	if spec.tracksContent() {
		e.Extra, _ = json.Marshal(dirExtra{Files: w.index.Len()})
	}
	return e, nil
}

// digest names a mirrored tree by its entries and their content IDs.
func (directoryDriver) digest(env *Env, r *resource.Resource) (string, error) {
	spec := r.Spec.(*DirectorySpec)
	plain := env
	env = spec.sourceEnv(env)
	h := sha256.New()
	h.Write([]byte(specHash(r)))
	if spec.sourcePath == "" {
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	err := env.Tree.Walk(spec.sourcePath, func(e source.Entry) error {
		id := e.Target
		if e.Mode.IsRegular() {
			var err error
			if legacy := e.LegacyFunc(); env.legacyIDs && legacy != nil {
				id, err = legacy()
			} else {
				id, err = e.ID()
			}
			if err != nil {
				return err
			}
		}
		fmt.Fprintf(h, "\n%s %o %s", e.Path, e.Mode, id)
		return nil
	})
	if err == nil && !env.recalled() {
		err = spec.decryptedDigest(plain, h)
	}
	return hex.EncodeToString(h.Sum(nil)), err
}
