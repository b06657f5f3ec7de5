package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"golang.org/x/sys/unix"
)

// FileSpec is a File's desired state.
type FileSpec struct {
	resource.Base `yaml:",inline"`
	Path          string         `yaml:"path" json:"path"`
	Content       *string        `yaml:"content" json:"-"` // named by ContentID, never stored
	Source        string         `yaml:"source" json:"source,omitempty"`
	Mode          *resource.Mode `yaml:"mode" json:"mode,omitempty"`
	Owner         string         `yaml:"owner" json:"owner,omitempty"`
	Group         string         `yaml:"group" json:"group,omitempty"`
	Sensitive     bool           `yaml:"sensitive" json:"sensitive,omitempty"`
	Ensure        string         `yaml:"ensure" json:"ensure,omitempty"`
	// Replace false creates the file when absent and never overwrites it.
	Replace *bool `yaml:"replace" json:"replace,omitempty"`

	sourcePath string // Source resolved to a repository path
}

// Validate checks the File's fields.
func (s *FileSpec) Validate(v *resource.Validation) {
	v.AbsPath("spec.path", s.Path)
	if s.Ensure != "" {
		v.OneOf("spec.ensure", s.Ensure, "present", "absent")
	}
	if s.Ensure == "absent" {
		return
	}
	switch {
	case s.Content != nil && s.Source != "":
		v.Errorf("spec.content", "give content or source, not both")
	case s.Content == nil && s.Source == "":
		v.Errorf("spec", "content or source is required")
	case s.Source != "":
		s.sourcePath = v.SourcePath("spec.source", s.Source, false)
	}
}

// Claims is the file's path.
func (s *FileSpec) Claims() []resource.Claim {
	return []resource.Claim{{Field: "spec.path", Path: s.Path}}
}

func (s *FileSpec) absent() bool { return s.Ensure == "absent" }

// desired names the wanted content and opens it.
func (s *FileSpec) desired(env *Env) (string, func() (io.ReadCloser, error), error) {
	if s.Content != nil {
		b := []byte(*s.Content)
		return source.ContentDigest(b), func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, nil
	}
	id, err := env.Tree.ContentID(s.sourcePath)
	if err != nil {
		return "", nil, fmt.Errorf("source %s: %w", s.Source, err)
	}
	return id, func() (io.ReadCloser, error) { return env.Tree.Open(s.sourcePath) }, nil
}

type fileDriver struct{}

// fileWork is what a File change will do.
type fileWork struct {
	contentID string
	open      func() (io.ReadCloser, error)
	attrs     attrs
	write     bool // write the content
	setAttrs  bool // fix mode or owners in place
	replace   bool // something that is not a regular file is in the way
	backup    bool // what is there was not written by cortex-sync
	ours      bool // the live content is what cortex-sync last wrote
	matches   bool // the live content is the desired content
	existed   bool
}

// fingerprint is a record's live fingerprint in the index's terms.
func fingerprint(rec *state.Entry) *state.IndexEntry {
	if rec == nil || rec.Live == nil {
		return nil
	}
	return &state.IndexEntry{Stat: rec.Live.Stat, SHA256: rec.Live.SHA256}
}

// lstat opens p's parent (if it exists) and describes p.
func lstat(env *Env, p string) (*hostfs.Dir, string, *hostfs.Stat, error) {
	d, base, err := env.Root.Parent(p, false)
	if missing(err) {
		return nil, base, nil, nil
	}
	if err != nil {
		return nil, "", nil, err
	}
	st, err := d.Lstat(base)
	if missing(err) {
		return d, base, nil, nil
	}
	if err != nil {
		d.Close()
		return nil, "", nil, err
	}
	return d, base, &st, nil
}

func (fileDriver) Plan(ctx context.Context, env *Env, r *resource.Resource, rec *state.Entry) (*diff.Change, error) {
	p := ""
	var spec *FileSpec
	if r != nil {
		spec = r.Spec.(*FileSpec)
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
	fp := fingerprint(rec)
	ours := false
	if live != nil && fp != nil {
		if ours, err = unchanged(*live, fp, env.Snapshot.Racy(fp.Stat), env.Verify, func() (string, error) { return hashFile(d, base) }); err != nil {
			return nil, err
		}
	}
	w := &fileWork{ours: ours, existed: live != nil}
	c.Work = w

	if spec == nil || spec.absent() {
		if live == nil {
			return c, nil
		}
		c.Action, c.Reason = diff.Delete, diff.DeclaredAbsent
		w.backup = !ours
		return c, nil
	}
	if w.attrs, err = wantAttrs(spec.Mode, spec.Owner, spec.Group); err != nil {
		return nil, err
	}
	if w.contentID, w.open, err = spec.desired(env); err != nil {
		return nil, err
	}
	gitChanged := rec == nil || rec.ContentID != w.contentID || rec.SpecHash != specHash(r)
	switch {
	case live == nil:
		c.Action, c.Reason, w.write = diff.Create, diff.AddedInGit, true
		if rec != nil {
			c.Reason = diff.MissingOnHost
		}
		c.Health = health.Missing
		c.Attrs = w.attrs.diffs(hostfs.Stat{UID: ^uint32(0), GID: ^uint32(0)})
		for i := range c.Attrs {
			c.Attrs[i].Before = "" // nothing there yet
		}
		c.Content, err = contentDiff(d, base, nil, w.open, spec.Sensitive)
		return c, err
	case !live.Mode.IsRegular():
		c.Action, c.Reason = diff.Update, diff.Drifted
		if rec == nil {
			c.Reason = diff.AddedInGit
		}
		w.write, w.replace, w.backup = true, true, true
		c.Attrs = []diff.Attr{{Field: "type", Before: typeName(live.Mode), After: "file"}}
		return c, nil
	}
	w.matches = ours && rec.ContentID == w.contentID
	if !w.matches {
		if w.matches, err = sameContent(d, base, w.open); err != nil {
			return nil, err
		}
	}
	contentDiffers := !w.matches
	if spec.Replace != nil && !*spec.Replace {
		contentDiffers = false
	}
	c.Attrs = w.attrs.diffs(*live)
	if !contentDiffers && len(c.Attrs) == 0 {
		return c, nil
	}
	c.Action = diff.Update
	switch {
	case rec == nil:
		c.Reason = diff.AddedInGit
	case !ours || !gitChanged:
		c.Reason = diff.Drifted
	default:
		c.Reason = diff.ChangedInGit
	}
	w.write, w.setAttrs = contentDiffers, len(c.Attrs) > 0
	w.backup = contentDiffers && !ours
	if contentDiffers {
		c.Content, err = contentDiff(d, base, live, w.open, spec.Sensitive)
	}
	return c, err
}

func typeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsRegular():
		return "file"
	}
	return "special file"
}

// sameContent compares the live file with the desired content, streaming.
func sameContent(d *hostfs.Dir, name string, open func() (io.ReadCloser, error)) (bool, error) {
	lf, err := d.Open(name)
	if err != nil {
		return false, err
	}
	defer lf.Close()
	df, err := open()
	if err != nil {
		return false, err
	}
	defer df.Close()
	a, b := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(lf, a)
		nb, eb := io.ReadFull(df, b)
		if na != nb || !bytes.Equal(a[:na], b[:nb]) {
			return false, nil
		}
		if ea != nil || eb != nil {
			return (ea == io.EOF || ea == io.ErrUnexpectedEOF) && (eb == io.EOF || eb == io.ErrUnexpectedEOF), nil
		}
	}
}

// contentDiff shows how the live content (nil: none) becomes the desired.
func contentDiff(d *hostfs.Dir, name string, live *hostfs.Stat, open func() (io.ReadCloser, error), sensitive bool) (*diff.Content, error) {
	if sensitive {
		return &diff.Content{Summary: "sensitive content hidden"}, nil
	}
	const limit = 256 << 10
	var before []byte
	if live != nil {
		if live.Size > limit {
			return &diff.Content{Summary: fmt.Sprintf("large content (%d bytes) replaced", live.Size)}, nil
		}
		f, err := d.Open(name)
		if err != nil {
			return nil, err
		}
		before, err = io.ReadAll(f)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	rc, err := open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	after, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if len(after) > limit {
		return &diff.Content{Summary: "large content"}, nil
	}
	return diff.ContentChange(before, after, false), nil
}

func (fileDriver) Apply(ctx context.Context, env *Env, c *diff.Change) (*state.Entry, error) {
	w := c.Work.(*fileWork)
	if c.Action == diff.Delete {
		return nil, removeEntry(env, c.Path, w.backup, false)
	}
	spec := c.Desired.Spec.(*FileSpec)
	if spec.absent() {
		return nil, nil // absent already: nothing to record
	}
	d, base, err := env.Root.Parent(spec.Path, true)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if w.backup {
		if _, err := env.Backups.Save(d, base); err != nil {
			return nil, err
		}
	}
	if w.replace {
		if err := d.RemoveAll(base); err != nil {
			return nil, err
		}
	}
	sum := ""
	if w.write {
		if sum, err = writeFile(d, base, w.open, w.attrs.host(0o644)); err != nil {
			return nil, err
		}
	} else if w.setAttrs {
		st, err := d.Lstat(base)
		if err != nil {
			return nil, err
		}
		if err := d.SetAttrs(base, w.attrs.host(st.Mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))); err != nil {
			return nil, err
		}
	}
	st, err := d.Lstat(base)
	if err != nil {
		return nil, err
	}
	if sum == "" {
		if w.ours {
			sum = c.Record.Live.SHA256
		} else if sum, err = hashFile(d, base); err != nil {
			return nil, err
		}
	}
	e := newEntry(c.Desired, spec.Path)
	if w.write || w.matches {
		e.ContentID = w.contentID // else (replace: false) the host keeps other content
	}
	e.Live = &state.Fingerprint{Stat: st, SHA256: sum}
	e.Created = !w.existed || (c.Record != nil && c.Record.Created)
	return e, nil
}

// writeFile replaces name with the content, atomically and durably: temp
// file, fsync, rename, fsync the directory.
func writeFile(d *hostfs.Dir, name string, open func() (io.ReadCloser, error), a hostfs.Attrs) (string, error) {
	rc, err := open()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	tmp, sum, err := d.WriteTemp(name, rc, a)
	if err != nil {
		return "", err
	}
	if err := d.SyncFile(tmp); err != nil {
		d.Remove(tmp)
		return "", err
	}
	if err := d.Rename(tmp, name); err != nil {
		d.Remove(tmp)
		return "", err
	}
	return sum, d.Sync()
}

// removeEntry deletes p, keeping a backup first when asked. A directory is
// removed whole only when tree says so.
func removeEntry(env *Env, p string, backup, tree bool) error {
	d, base, err := env.Root.Parent(p, false)
	if missing(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	if _, err := d.Lstat(base); missing(err) {
		return nil
	}
	if backup {
		if _, err := env.Backups.Save(d, base); err != nil {
			return err
		}
	}
	if tree {
		err = d.RemoveAll(base)
	} else {
		err = d.Remove(base)
	}
	if err != nil {
		if errors.Is(err, unix.ENOTEMPTY) {
			return fmt.Errorf("%s is a directory that is not empty; not deleting it", p)
		}
		return err
	}
	return d.Sync()
}

func (fileDriver) Observe(ctx context.Context, env *Env, rec *state.Entry) health.Report {
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
	fp := fingerprint(rec)
	if fp == nil {
		return health.Report{Sync: health.OutOfSync, Health: health.Unknown, Reason: "no fingerprint recorded"}
	}
	ok, err := unchanged(*live, fp, env.Snapshot.Racy(fp.Stat), env.Verify, func() (string, error) { return hashFile(d, base) })
	switch {
	case err != nil:
		return health.Report{Sync: health.OutOfSync, Health: health.Unknown, Reason: err.Error()}
	case !ok:
		return health.Report{Sync: health.OutOfSync, Health: health.Healthy, Reason: "content drifted on the host"}
	case live.Mode != fp.Mode || live.UID != fp.UID || live.GID != fp.GID:
		return health.Report{Sync: health.OutOfSync, Health: health.Healthy, Reason: "mode or owner drifted on the host"}
	}
	return health.Report{Sync: health.Synced, Health: health.Healthy}
}

func (fileDriver) digest(env *Env, r *resource.Resource) (string, error) {
	spec := r.Spec.(*FileSpec)
	if spec.absent() {
		return specHash(r), nil
	}
	id, _, err := spec.desired(env)
	return specHash(r) + ":" + id, err
}
