package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// DirectorySpec is a Directory's desired state: a directory, optionally a
// mirror of a repository directory (the knowledge-base case).
type DirectorySpec struct {
	resource.Base `yaml:",inline"`
	Path          string         `yaml:"path" json:"path"`
	Mode          *resource.Mode `yaml:"mode" json:"mode,omitempty"`
	Owner         string         `yaml:"owner" json:"owner,omitempty"`
	Group         string         `yaml:"group" json:"group,omitempty"`
	Ensure        string         `yaml:"ensure" json:"ensure,omitempty"`
	// Source is a repository directory to mirror, file by file.
	Source string `yaml:"source" json:"source,omitempty"`
	// Purge deletes entries inside that nothing manages.
	Purge bool `yaml:"purge" json:"purge,omitempty"`

	sourcePath string
}

// Validate checks the Directory's fields.
func (s *DirectorySpec) Validate(v *resource.Validation) {
	v.AbsPath("spec.path", s.Path)
	if s.Ensure != "" {
		v.OneOf("spec.ensure", s.Ensure, "present", "absent")
	}
	if s.Source != "" && s.Ensure != "absent" {
		s.sourcePath = v.SourcePath("spec.source", s.Source, true)
	}
}

// Claims is the directory, and everything below it when mirrored.
func (s *DirectorySpec) Claims() []resource.Claim {
	return []resource.Claim{{Field: "spec.path", Path: s.Path, Tree: s.Source != ""}}
}

func (s *DirectorySpec) tracksContent() bool { return s.Source != "" || s.Purge }

type directoryDriver struct{}

type dirWork struct {
	existed, replace, backup, setAttrs bool
	attrs                              attrs
	ops                                []treeOp
	index                              *state.Index // the new index: entries that need no op
	dirty                              bool         // index entries were refreshed
	declared                           bool         // delete asked for by ensure: absent
	mu                                 sync.Mutex   // guards index while files are written in parallel
}

func treeIndexFile(env *Env, id string) string {
	return filepath.Join(env.State.Sub("trees"), strings.ReplaceAll(id, "/", ".")+".idx")
}

func (directoryDriver) Plan(ctx context.Context, env *Env, r *resource.Resource, rec *state.Entry) (*diff.Change, error) {
	var spec *DirectorySpec
	p := ""
	if r != nil {
		spec = r.Spec.(*DirectorySpec)
		p = spec.Path
	} else {
		p = rec.Path
	}
	c := &diff.Change{Path: p, Health: health.Healthy}
	d, base, live, err := lstat(env, p)
	if err != nil {
		return nil, err
	}
	if d != nil {
		defer d.Close()
	}
	old := state.NewIndex()
	if rec != nil {
		if old, err = state.LoadIndex(treeIndexFile(env, rec.ID)); err != nil {
			return nil, err
		}
	}
	w := &dirWork{existed: live != nil, index: state.NewIndex()}
	c.Work = w

	if spec == nil || spec.Ensure == "absent" {
		if live == nil {
			return c, nil
		}
		c.Action, c.Reason = diff.Delete, diff.DeclaredAbsent
		w.declared = spec != nil
		w.index = old
		return c, nil
	}
	if w.attrs, err = wantAttrs(spec.Mode, spec.Owner, spec.Group); err != nil {
		return nil, err
	}
	gitChanged := rec == nil || rec.SpecHash != specHash(r)
	switch {
	case live == nil:
		c.Action, c.Reason, c.Health = diff.Create, diff.AddedInGit, health.Missing
		if rec != nil {
			c.Reason = diff.MissingOnHost
		}
	case !live.Mode.IsDir():
		c.Action, c.Reason = diff.Update, diff.Drifted
		if rec == nil {
			c.Reason = diff.AddedInGit
		}
		w.replace, w.backup = true, true
		c.Attrs = []diff.Attr{{Field: "type", Before: typeName(live.Mode), After: "directory"}}
	default:
		if c.Attrs = w.attrs.diffs(*live); len(c.Attrs) > 0 {
			c.Action, c.Reason, w.setAttrs = diff.Update, diff.ChangedInGit, true
			if !gitChanged {
				c.Reason = diff.Drifted
			}
		}
	}
	if spec.tracksContent() {
		var top *hostfs.Dir
		if live != nil && live.Mode.IsDir() {
			if top, err = d.OpenDir(base); err != nil {
				return nil, err
			}
			defer top.Close()
		}
		if err := planTree(env, r, spec, top, old, w); err != nil {
			return nil, err
		}
	}
	for _, op := range w.ops {
		c.Files = append(c.Files, diff.FileChange{Path: op.rel, Action: op.action, Reason: op.reason})
		if op.reason == diff.Drifted || op.reason == diff.MissingOnHost {
			c.Drifted++
		}
	}
	if (c.Action == "" || c.Action == diff.NoOp) && len(w.ops) > 0 {
		c.Action, c.Reason = diff.Update, treeReason(w.ops)
	}
	return c, nil
}

// dirExtra is what the snapshot keeps of a directory beyond its record.
type dirExtra struct {
	Files int `json:"files"`
}

func (directoryDriver) Apply(ctx context.Context, env *Env, c *diff.Change) (*state.Entry, error) {
	w := c.Work.(*dirWork)
	if c.Action == diff.Delete {
		return nil, deleteTree(env, c, w)
	}
	spec := c.Desired.Spec.(*DirectorySpec)
	if spec.Ensure == "absent" {
		return nil, nil // absent already: nothing to record
	}
	d, base, err := env.Root.Parent(spec.Path, true)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if w.replace {
		if _, err := env.Backups.Save(d, base); err != nil {
			return nil, err
		}
		if err := d.RemoveAll(base); err != nil {
			return nil, err
		}
	}
	if !w.existed || w.replace {
		if err := d.Mkdir(base, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		w.setAttrs = w.attrs.mode != 0 || w.attrs.uid >= 0 || w.attrs.gid >= 0
	}
	if w.setAttrs {
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
	if len(w.ops) > 0 {
		if err := applyTree(ctx, env, spec, top, w); err != nil {
			return nil, err
		}
	}
	if spec.tracksContent() && (w.dirty || len(w.ops) > 0 || c.Record == nil) {
		if err := w.index.Save(treeIndexFile(env, string(c.ID))); err != nil {
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
	e.Created = !w.existed || (c.Record != nil && c.Record.Created)
	if spec.tracksContent() {
		e.Extra, _ = json.Marshal(dirExtra{Files: len(w.index.Entries)})
	}
	return e, nil
}

func (directoryDriver) Observe(ctx context.Context, env *Env, rec *state.Entry) health.Report {
	d, base, live, err := lstat(env, rec.Path)
	if err != nil {
		return health.Report{Sync: health.OutOfSync, Health: health.Unknown, Reason: err.Error()}
	}
	if d != nil {
		defer d.Close()
	}
	switch {
	case live == nil:
		return health.Report{Sync: health.OutOfSync, Health: health.Missing, Reason: "missing on the host"}
	case !live.Mode.IsDir():
		return health.Report{Sync: health.OutOfSync, Health: health.Healthy, Reason: "replaced by a " + typeName(live.Mode)}
	}
	old, err := state.LoadIndex(treeIndexFile(env, rec.ID))
	if err != nil || len(old.Entries) == 0 {
		return health.Report{Sync: health.Synced, Health: health.Healthy}
	}
	top, err := d.OpenDir(base)
	if err != nil {
		return health.Report{Sync: health.OutOfSync, Health: health.Unknown, Reason: err.Error()}
	}
	defer top.Close()
	tree := map[string]liveEntry{}
	if err := walkHost(top, "", tree); err != nil {
		return health.Report{Sync: health.OutOfSync, Health: health.Unknown, Reason: err.Error()}
	}
	drifted, gone := 0, 0
	for rel, prev := range old.Entries {
		le, ok := tree[rel]
		switch {
		case !ok:
			gone++
		case prev.Mode.IsDir():
		case le.Mode.Type() != prev.Mode.Type():
			drifted++
		case le.Mode&fs.ModeSymlink != 0:
			if le.target != prev.SHA256 {
				drifted++
			}
		default:
			hash := func() (string, error) {
				dir, name := top, rel
				if i := strings.LastIndexByte(rel, '/'); i >= 0 {
					sub, err := openRel(top, rel[:i])
					if err != nil {
						return "", err
					}
					defer sub.Close()
					dir, name = sub, rel[i+1:]
				}
				return hashFile(dir, name)
			}
			if ok, err := unchanged(le.Stat, prev, old.Racy(prev), env.Verify, hash); err != nil || !ok {
				drifted++
			}
		}
	}
	if drifted+gone > 0 {
		return health.Report{Sync: health.OutOfSync, Health: health.Healthy, Reason: fmt.Sprintf("%s drifted, %s missing on the host", files(drifted), files(gone))}
	}
	return health.Report{Sync: health.Synced, Health: health.Healthy}
}

// files counts files in words: "1 file", "3 files".
func files(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}

// digest names a mirrored tree by its entries and their content IDs.
func (directoryDriver) digest(env *Env, r *resource.Resource) (string, error) {
	spec := r.Spec.(*DirectorySpec)
	h := sha256.New()
	h.Write([]byte(specHash(r)))
	if spec.sourcePath == "" {
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	err := env.Tree.Walk(spec.sourcePath, func(e source.Entry) error {
		id := e.Target
		if e.Mode.IsRegular() {
			var err error
			if id, err = e.ContentID(); err != nil {
				return err
			}
		}
		fmt.Fprintf(h, "\n%s %o %s", e.Path, e.Mode, id)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}
