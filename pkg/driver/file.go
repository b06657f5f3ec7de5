package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/index"
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
	// Decrypt "sops": source is a SOPS file; the target holds its
	// plaintext, handled as sensitive content, mode 0600 unless given.
	Decrypt string          `yaml:"decrypt" json:"decrypt,omitempty"`
	Ensure  resource.Ensure `yaml:"ensure" json:"ensure,omitempty"`
	// Replace false creates the file when absent and never overwrites it.
	Replace *bool `yaml:"replace" json:"replace,omitempty"`

	sourcePath string // Source resolved to a repository path
	secretVars bool   // rendered with a secret variable
}

// Validate checks the File's fields.
func (s *FileSpec) Validate(v *resource.Validation) {
	defer s.substitute(v)
	v.AbsPath("spec.path", s.Path)
	s.Ensure.Validate(v, "spec.ensure")
	if s.Ensure.Absent() {
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
	validDecrypt(v, "spec.decrypt", s.Decrypt)
	if s.Decrypt != "" && s.Content != nil {
		v.Errorf("spec.decrypt", "decrypts a source: a SOPS file in the repository, not inline content")
	}
	if s.Decrypt != "" && s.Substitute {
		v.Errorf("spec.substitute", "a File cannot both decrypt and substitute (it would render the SOPS file, not its plaintext); put the secret values in a SOPS-encrypted vars file (varsFiles in fleet.yaml) and render them into a plain template with substitute: true")
	}
}

// sopsSources is the File's SOPS source, when it decrypts one.
func (s *FileSpec) sopsSources() []sopsSource {
	if s.Decrypt == "" || s.absent() {
		return nil
	}
	return []sopsSource{{field: "spec.source", source: s.Source, path: s.sourcePath}}
}

// secret: the content is not to be shown or recorded in the clear.
func (s *FileSpec) secret() bool { return s.Sensitive || s.holdsSecret() }

// holdsSecret: the content is a secret Git keeps encrypted, a SOPS file's
// plaintext or a rendering that used a secret variable.
func (s *FileSpec) holdsSecret() bool { return s.Decrypt != "" || s.secretVars }

// mode is the wanted mode: a File holding a secret is 0600 unless given.
func (s *FileSpec) mode() *resource.Mode {
	if s.Mode == nil && s.holdsSecret() {
		m := resource.Mode(0o600)
		return &m
	}
	return s.Mode
}

// Claims is the file's path.
func (s *FileSpec) Claims() []resource.Claim {
	return []resource.Claim{{Field: "spec.path", Path: s.Path}}
}

func (s *FileSpec) absent() bool { return s.Ensure.Absent() }

// desired names the wanted content. Recalled from the record, the content
// is what cortex-sync last wrote, known only by its ID.
func (s *FileSpec) desired(env *Env, rec *state.Entry) (string, error) {
	switch {
	case env.recalled():
		if rec == nil {
			return "", nil
		}
		return rec.ContentID, nil
	case s.Content != nil:
		return env.keyedIf(s.Sensitive, source.ContentDigest([]byte(*s.Content)))
	case s.Decrypt != "":
		return env.decryptedID(s.sourcePath, s.Source)
	}
	id, err := env.Tree.ContentID(s.sourcePath)
	if err != nil {
		return "", fmt.Errorf("source %s: %w", s.Source, err)
	}
	return env.keyedIf(s.Sensitive, id)
}

// legacy names the wanted content as an older cortex-sync did (inline, or
// from a directory: "sha256:…"), keyed as desired is; nil where there was
// no other form.
func (s *FileSpec) legacy(env *Env) func() (string, error) {
	switch {
	case env.recalled(), s.Decrypt != "":
		return nil
	case s.Content != nil:
		return func() (string, error) { return env.keyedIf(s.Sensitive, source.LegacyDigest([]byte(*s.Content))) }
	}
	lt, ok := env.Tree.(source.LegacyTree)
	if !ok {
		return nil
	}
	return func() (string, error) {
		id, err := lt.LegacyID(s.sourcePath)
		if err != nil {
			return "", err
		}
		return env.keyedIf(s.Sensitive, id)
	}
}

// opener opens the wanted content; nil when it is recalled (known only by
// its ID).
func (s *FileSpec) opener(env *Env) func() (io.ReadCloser, error) {
	switch {
	case env.recalled():
		return nil
	case s.Content != nil:
		b := []byte(*s.Content)
		return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	case s.Decrypt != "":
		// the plaintext lives in memory only while it is compared or written
		return func() (io.ReadCloser, error) {
			b, err := env.decryptFile(s.sourcePath, s.Source)
			if err != nil {
				return nil, err
			}
			return &plaintext{Reader: bytes.NewReader(b), b: b}, nil
		}
	}
	return func() (io.ReadCloser, error) { return env.Tree.Open(s.sourcePath) }
}

// keyRecord is the record of a sensitive File as this version keeps it:
// content ID and live SHA-256 keyed with the host key. A record an older
// cortex-sync wrote unkeyed is keyed here (the keyed ID is a function of
// the unkeyed one), so it compares equal with no change shown, and the
// next save of the snapshot stores the keyed form: a migration, never a
// rewrite of the file.
func keyRecord(env *Env, spec *FileSpec, rec *state.Entry) (*state.Entry, error) {
	if rec == nil || spec == nil || !spec.secret() || spec.absent() {
		return rec, nil
	}
	if isKeyed(rec.ContentID) && (rec.Live == nil || rec.Live.SHA256 == "" || isKeyed(rec.Live.SHA256)) {
		return rec, nil
	}
	cp := *rec
	var err error
	if cp.ContentID, err = env.keyed(rec.ContentID); err != nil {
		return nil, err
	}
	if rec.Live != nil {
		live := *rec.Live
		if live.SHA256, err = env.keyed(live.SHA256); err != nil {
			return nil, err
		}
		cp.Live = &live
	}
	return &cp, nil
}

func (s *FileSpec) keepContent() bool { return s.Replace != nil && !*s.Replace }

func init() {
	Register("File", func() resource.Spec { return &FileSpec{} }, fileDriver{})
}

type fileDriver struct{}

// fileWork is what an observation of a File learned that its apply uses.
type fileWork struct {
	look
	contentID string
	attrs     attrs
	same      bool // the live content is the desired content
}

// look is what a change of one path was decided on: where the path's
// parent resolved when it was observed ("" when it did not exist), and
// what was at the path (nil: nothing).
type look struct {
	dir  string
	live *hostfs.Stat
}

// lookAt is the look of an observation: the parent d (nil: missing) and
// what lstat found in it.
func lookAt(d *hostfs.Dir, live *hostfs.Stat) look {
	l := look{live: live}
	if d != nil {
		l.dir = d.Path()
	}
	return l
}

// errStale: the host moved under a planned change between its look and
// its apply.
var errStale = errors.New("changed since it was planned; not touched: the next pass looks again")

// stale refuses to act on a look the host no longer matches: the path now
// resolves through another directory (a symlink swapped in on the way,
// by a resource applied before it in the same sync), or something came,
// went or changed at it. Acting would write over or delete what the plan
// never looked at, with no backup.
func (w *look) stale(d *hostfs.Dir, base string) error {
	if w == nil {
		return nil
	}
	if w.dir != "" && d.Path() != w.dir {
		return fmt.Errorf("%s: it resolves to %s now, not %s: %w", path.Join(w.dir, base), d.Path(), w.dir, errStale)
	}
	st, err := d.Lstat(base)
	switch {
	case missing(err):
		if w.live != nil {
			return fmt.Errorf("%s is gone: %w", path.Join(d.Path(), base), errStale)
		}
		return nil
	case err != nil:
		return err
	case w.live == nil:
		return fmt.Errorf("%s came to be: %w", path.Join(d.Path(), base), errStale)
	case st.Ino != w.live.Ino || st.Size != w.live.Size || st.Mtime != w.live.Mtime || st.Mode != w.live.Mode:
		return fmt.Errorf("%s was changed: %w", path.Join(d.Path(), base), errStale)
	}
	return nil
}

// fingerprint is a record's live fingerprint in the index's terms.
func fingerprint(rec *state.Entry) *index.Entry {
	if rec == nil || rec.Live == nil {
		return nil
	}
	return &index.Entry{Stat: rec.Live.Stat, SHA256: rec.Live.SHA256}
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

func (fileDriver) Observe(ctx context.Context, env *Env, r *resource.Resource, rec *state.Entry) (*diff.Change, error) {
	var spec *FileSpec
	if r != nil {
		spec = r.Spec.(*FileSpec)
	}
	recorded := rec
	rec, err := keyRecord(env, spec, rec)
	if err != nil {
		return nil, err
	}
	p := pathOf(spec.pathOrEmpty(), rec)
	c := &diff.Change{Path: p}
	d, base, live, err := lstat(env, p)
	if err != nil {
		return nil, err
	}
	if d != nil {
		defer d.Close()
	}
	c.Record = rec // keyed, should it have been recorded unkeyed
	o := &c.Observed
	o.Recorded, o.Exists = rec != nil, live != nil
	o.Stale = rec != recorded // keyed here: the record is saved keyed
	if live != nil {
		o.Live = fmt.Sprintf("ino %d size %d mtime %d ctime %d mode %v uid %d gid %d", live.Ino, live.Size, live.Mtime, live.Ctime, live.Mode, live.UID, live.GID)
	}
	if live != nil && !live.Mode.IsRegular() {
		o.WrongType = typeName(live.Mode)
	}
	if fp := fingerprint(rec); live != nil && fp != nil && o.WrongType == "" {
		hash := func() (string, error) {
			sum, err := hashFile(d, base, live.Size)
			if err != nil {
				return "", err
			}
			return env.likeRecord(fp.SHA256, sum)
		}
		if o.Ours, err = unchanged(*live, fp, env.Snapshot.Racy(fp.Stat), env.Verify, hash, nil); err != nil {
			return nil, err
		}
	}
	w := &fileWork{look: lookAt(d, live)}
	c.Work = w
	if spec == nil || spec.absent() {
		o.Declared = spec != nil
		return c, nil
	}
	o.Desired = true
	if w.attrs, err = wantAttrs(spec.mode(), spec.Owner, spec.Group); err != nil {
		return nil, err
	}
	if w.contentID, err = spec.desired(env, rec); err != nil {
		return nil, err
	}
	open := spec.opener(env)
	sameID := false
	if rec != nil {
		if sameID, err = source.SameContent(rec.ContentID, w.contentID, spec.legacy(env)); err != nil {
			return nil, err
		}
		// Recorded in the older form of content IDs: the record is saved
		// anew, and nothing else changes.
		o.Stale = o.Stale || (sameID && rec.ContentID != w.contentID)
	}
	o.GitChanged = rec == nil || !sameID || rec.SpecHash != specHash(r)
	switch {
	case live == nil:
		o.Attrs = w.attrs.diffs(nil)
		c.Content, err = contentDiff(nil, "", nil, open, spec.secret())
		return c, err
	case o.WrongType != "":
		c.Attrs = []diff.Attr{{Field: "type", Before: o.WrongType, After: "file"}}
		return c, nil
	}
	o.Matches = o.Ours && sameID
	if !o.Matches && open != nil {
		if o.Matches, err = sameContent(d, base, open); err != nil {
			return nil, err
		}
	}
	w.same = o.Matches
	if spec.keepContent() {
		o.Matches = true // replace: false never overwrites what is there
	}
	o.Attrs = w.attrs.diffs(live)
	if !o.Matches {
		c.Content, err = contentDiff(d, base, live, open, spec.secret())
	}
	return c, err
}

func (s *FileSpec) pathOrEmpty() string {
	if s == nil {
		return ""
	}
	return s.Path
}

// pathOf is the desired path, or the recorded one when it left Git.
func pathOf(desired string, rec *state.Entry) string {
	if desired == "" && rec != nil {
		return rec.Path
	}
	return desired
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
	switch {
	case sensitive:
		return &diff.Content{Summary: "sensitive content hidden"}, nil
	case open == nil:
		return &diff.Content{Summary: "content differs from what cortex-sync last wrote"}, nil
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
	w, o := c.Work.(*fileWork), &c.Observed
	if c.Action == diff.Delete {
		return nil, removeEntry(env, c.Path, !o.Ours, false, w.stale)
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
	if err := w.stale(d, base); err != nil {
		return nil, err
	}
	if _, err := d.RemoveTemps(base); err != nil {
		return nil, err // left beside it by a write that was killed
	}
	write := !o.Exists || o.WrongType != "" || !o.Matches
	if o.Exists && write && !o.Ours {
		if _, err := env.Backups.Save(d, base); err != nil {
			return nil, err
		}
	}
	if o.WrongType != "" {
		if err := d.RemoveAll(base); err != nil {
			return nil, err
		}
	}
	sum := ""
	var wrote hostfs.Stat
	if write {
		if sum, wrote, err = writeFile(d, base, spec.opener(env), w.attrs.host(0o644)); err != nil {
			return nil, err
		}
	} else if len(o.Attrs) > 0 {
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
	if write {
		st = fingerprintAfter(wrote, st)
	}
	if sum == "" {
		if o.Ours {
			sum = c.Record.Live.SHA256
		} else if sum, err = hashFile(d, base, -1); err != nil {
			return nil, err
		}
	}
	if sum, err = env.keyedIf(spec.secret(), sum); err != nil {
		return nil, err
	}
	e := newEntry(c.Desired, spec.Path)
	if write || w.same {
		e.ContentID = w.contentID // else (replace: false) the host keeps other content
	}
	e.Live = &state.Fingerprint{Stat: st, SHA256: sum}
	e.Created = !o.Exists || (c.Record != nil && c.Record.Created)
	return e, nil
}

// writeFile replaces name with the content, atomically and durably: temp
// file, fsync, rename, fsync the directory.
func writeFile(d *hostfs.Dir, name string, open func() (io.ReadCloser, error), a hostfs.Attrs) (string, hostfs.Stat, error) {
	rc, err := open()
	if err != nil {
		return "", hostfs.Stat{}, err
	}
	defer rc.Close()
	tmp, sums, err := d.WriteTemp(name, rc, a)
	if err != nil {
		return "", hostfs.Stat{}, err
	}
	wrote, err := d.Lstat(tmp)
	if err == nil {
		err = d.SyncFile(tmp)
	}
	if err == nil {
		err = d.Rename(tmp, name)
	}
	if err != nil {
		d.Remove(tmp)
		return "", hostfs.Stat{}, err
	}
	return sums.SHA256, wrote, d.Sync()
}

// fingerprintAfter is the fingerprint to record for a file just renamed
// into place: its stat now, unless someone wrote it between the rename and
// that stat; then a size no file has, so the next look reads its content
// instead of trusting a stat of something cortex-sync did not write.
func fingerprintAfter(wrote, now hostfs.Stat) hostfs.Stat {
	if now.Ino != wrote.Ino || now.Size != wrote.Size || now.Mtime != wrote.Mtime {
		now.Size = -1
	}
	return now
}

// removeEntry deletes p, keeping a backup first when asked. A directory is
// removed whole only when tree says so. check, when set, refuses a host
// that moved since p was looked at.
func removeEntry(env *Env, p string, backup, tree bool, check func(*hostfs.Dir, string) error) error {
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
	if check != nil {
		if err := check(d, base); err != nil {
			return err
		}
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

func (fileDriver) digest(env *Env, r *resource.Resource) (string, error) {
	spec := r.Spec.(*FileSpec)
	if spec.absent() {
		return specHash(r), nil
	}
	id, err := spec.desired(env, env.Snapshot.Find(string(r.ID())))
	if legacy := spec.legacy(env); env.legacyIDs && legacy != nil && err == nil {
		id, err = legacy()
	}
	return specHash(r) + ":" + id, err
}
