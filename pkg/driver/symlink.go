package driver

import (
	"context"
	"io/fs"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// SymlinkSpec is a Symlink's desired state.
type SymlinkSpec struct {
	resource.Base `yaml:",inline"`
	Path          string `yaml:"path" json:"path"`
	Target        string `yaml:"target" json:"target"`
	Ensure        string `yaml:"ensure" json:"ensure,omitempty"`
}

// Validate checks the Symlink's fields.
func (s *SymlinkSpec) Validate(v *resource.Validation) {
	v.AbsPath("spec.path", s.Path)
	if s.Ensure != "" {
		v.OneOf("spec.ensure", s.Ensure, "present", "absent")
	}
	if s.Ensure != "absent" && s.Target == "" {
		v.Errorf("spec.target", "is required")
	}
}

// Claims is the link's path.
func (s *SymlinkSpec) Claims() []resource.Claim {
	return []resource.Claim{{Field: "spec.path", Path: s.Path}}
}

type symlinkDriver struct{}

type symlinkWork struct {
	backup  bool
	existed bool
}

func (symlinkDriver) Plan(ctx context.Context, env *Env, r *resource.Resource, rec *state.Entry) (*diff.Change, error) {
	var spec *SymlinkSpec
	p := ""
	if r != nil {
		spec = r.Spec.(*SymlinkSpec)
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
	target := ""
	if live != nil && live.Mode&fs.ModeSymlink != 0 {
		if target, err = d.Readlink(base); err != nil {
			return nil, err
		}
	}
	// A link is ours while it still points where cortex-sync pointed it.
	ours := rec != nil && live != nil && live.Mode&fs.ModeSymlink != 0 && target == rec.ContentID
	w := &symlinkWork{existed: live != nil, backup: live != nil && !ours}
	c.Work = w
	if spec == nil || spec.Ensure == "absent" {
		if live != nil {
			c.Action, c.Reason = diff.Delete, diff.DeclaredAbsent
		}
		return c, nil
	}
	switch {
	case live == nil:
		c.Action, c.Reason, c.Health = diff.Create, diff.AddedInGit, health.Missing
		if rec != nil {
			c.Reason = diff.MissingOnHost
		}
		c.Attrs = []diff.Attr{{Field: "target", After: spec.Target}}
	case live.Mode&fs.ModeSymlink == 0:
		c.Action, c.Reason = diff.Update, diff.Drifted
		if rec == nil {
			c.Reason = diff.AddedInGit
		}
		c.Attrs = []diff.Attr{{Field: "type", Before: typeName(live.Mode), After: "symlink"}}
	case target != spec.Target:
		c.Action = diff.Update
		switch {
		case rec == nil:
			c.Reason = diff.AddedInGit
		case !ours:
			c.Reason = diff.Drifted
		default:
			c.Reason = diff.ChangedInGit
		}
		c.Attrs = []diff.Attr{{Field: "target", Before: target, After: spec.Target}}
	}
	return c, nil
}

func (symlinkDriver) Apply(ctx context.Context, env *Env, c *diff.Change) (*state.Entry, error) {
	w := c.Work.(*symlinkWork)
	if c.Action == diff.Delete {
		return nil, removeEntry(env, c.Path, w.backup, false)
	}
	spec := c.Desired.Spec.(*SymlinkSpec)
	if spec.Ensure == "absent" {
		return nil, nil // absent already: nothing to record
	}
	d, base, err := env.Root.Parent(spec.Path, true)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if c.Action != diff.NoOp {
		if st, err := d.Lstat(base); err == nil && st.Mode.IsDir() {
			// A directory in the way is moved to the backups, then removed.
			if _, err := env.Backups.Save(d, base); err != nil {
				return nil, err
			}
			if err := d.RemoveAll(base); err != nil {
				return nil, err
			}
		} else if err == nil && w.backup {
			if _, err := env.Backups.Save(d, base); err != nil {
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
	e.ContentID = spec.Target
	e.Live = &state.Fingerprint{Stat: st}
	e.Created = !w.existed || (c.Record != nil && c.Record.Created)
	return e, nil
}

func (symlinkDriver) Observe(ctx context.Context, env *Env, rec *state.Entry) health.Report {
	d, base, live, err := lstat(env, rec.Path)
	if err != nil {
		return health.Report{Sync: health.OutOfSync, Health: health.Unknown, Reason: err.Error()}
	}
	if d != nil {
		defer d.Close()
	}
	if live == nil {
		return health.Report{Sync: health.OutOfSync, Health: health.Missing, Reason: "missing on the host"}
	}
	if live.Mode&fs.ModeSymlink == 0 {
		return health.Report{Sync: health.OutOfSync, Health: health.Healthy, Reason: "replaced by a " + typeName(live.Mode)}
	}
	if target, err := d.Readlink(base); err != nil || target != rec.ContentID {
		return health.Report{Sync: health.OutOfSync, Health: health.Healthy, Reason: "target drifted on the host"}
	}
	return health.Report{Sync: health.Synced, Health: health.Healthy}
}
