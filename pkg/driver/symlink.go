package driver

import (
	"context"
	"io/fs"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// SymlinkSpec is a Symlink's desired state.
type SymlinkSpec struct {
	resource.Base `yaml:",inline"`
	Path          string          `yaml:"path" json:"path"`
	Target        string          `yaml:"target" json:"target"`
	Ensure        resource.Ensure `yaml:"ensure" json:"ensure,omitempty"`
}

// Validate checks the Symlink's fields.
func (s *SymlinkSpec) Validate(v *resource.Validation) {
	v.AbsPath("spec.path", s.Path)
	s.Ensure.Validate(v, "spec.ensure")
	if !s.Ensure.Absent() && s.Target == "" {
		v.Errorf("spec.target", "is required")
	}
}

// Claims is the link's path.
func (s *SymlinkSpec) Claims() []resource.Claim {
	return []resource.Claim{{Field: "spec.path", Path: s.Path}}
}

func init() {
	Register("Symlink", func() resource.Spec { return &SymlinkSpec{} }, symlinkDriver{})
}

type symlinkDriver struct{}

func (symlinkDriver) Observe(ctx context.Context, env *Env, r *resource.Resource, rec *state.Entry) (*diff.Change, error) {
	var spec *SymlinkSpec
	p := ""
	if r != nil {
		spec = r.Spec.(*SymlinkSpec)
		p = spec.Path
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
	o := &c.Observed
	o.Recorded, o.Exists = rec != nil, live != nil
	l := lookAt(d, live)
	c.Work = &l
	target := ""
	switch {
	case live == nil:
	case live.Mode&fs.ModeSymlink == 0:
		o.WrongType = typeName(live.Mode)
	default:
		if target, err = d.Readlink(base); err != nil {
			return nil, err
		}
	}
	// A link is ours while it still points where cortex-sync pointed it.
	o.Ours = rec != nil && live != nil && o.WrongType == "" && target == recordedTarget(rec)
	if spec == nil || spec.Ensure.Absent() {
		o.Declared = spec != nil
		return c, nil
	}
	o.Desired = true
	o.GitChanged = rec == nil || recordedTarget(rec) != spec.Target
	o.Matches = live != nil && o.WrongType == "" && target == spec.Target
	switch {
	case live == nil:
		c.Attrs = []diff.Attr{{Field: "target", After: spec.Target}}
	case o.WrongType != "":
		c.Attrs = []diff.Attr{{Field: "type", Before: o.WrongType, After: "symlink"}}
	case !o.Matches:
		c.Attrs = []diff.Attr{{Field: "target", Before: target, After: spec.Target}}
	}
	return c, nil
}

// recordedTarget is where cortex-sync last pointed the link (older
// snapshots kept it in ContentID).
func recordedTarget(rec *state.Entry) string {
	if rec.Target != "" {
		return rec.Target
	}
	return rec.ContentID
}

func (symlinkDriver) Apply(ctx context.Context, env *Env, c *diff.Change) (*state.Entry, error) {
	o := &c.Observed
	l, _ := c.Work.(*look) // nil: nothing to hold the host to
	if c.Action == diff.Delete {
		return nil, removeEntry(env, c.Path, !o.Ours, false, l.stale)
	}
	spec := c.Desired.Spec.(*SymlinkSpec)
	if spec.Ensure.Absent() {
		return nil, nil // absent already: nothing to record
	}
	d, base, err := env.Root.Parent(spec.Path, true)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if c.Action != diff.NoOp {
		if err := l.stale(d, base); err != nil {
			return nil, err
		}
		if o.Exists && !o.Ours {
			if _, err := env.Backups.Save(d, base); err != nil {
				return nil, err
			}
		}
		if o.WrongType == "directory" {
			if err := d.RemoveAll(base); err != nil {
				return nil, err
			}
		}
		if err := d.Symlink(spec.Target, base); err != nil {
			return nil, err
		}
		if err := d.Sync(); err != nil {
			return nil, err
		}
	}
	st, err := d.Lstat(base)
	if err != nil {
		return nil, err
	}
	e := newEntry(c.Desired, spec.Path)
	e.Target = spec.Target
	e.Live = &state.Fingerprint{Stat: st}
	e.Created = !o.Exists || (c.Record != nil && c.Record.Created)
	return e, nil
}
