// Package explain answers, for one host path, what cortex-sync knows of it:
// the resource or mirror entry that manages it, the manifest line and the
// commit behind it, when it was applied here, its backups and what it is
// tied to; for an unmanaged path, what contains it and whether a sync or a
// prune would delete it. It reads the snapshot and the Git cache alone.
package explain

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// HistoryLimit bounds the commits a walk for the last change of a path
// looks at (first-parent history, newest first). Past it, the change is
// said to be at or before the oldest commit looked at.
const HistoryLimit = 1000

// The ways a path is managed.
const (
	// ByResource: a resource claims the path itself.
	ByResource = "resource"
	// ByMirror: the path is an entry of a mirrored Directory, in Git.
	ByMirror = "mirror entry"
	// Unmanaged: nothing manages the path.
	Unmanaged = "unmanaged"
)

// Explanation is what explain says of one host path (explain -o json;
// docs/plan-json.md).
type Explanation struct {
	// Path is the host path asked about; InRoot is the same path under
	// --root, as manifests name it.
	Path   string `json:"path"`
	InRoot string `json:"inRoot"`
	// Managed is ByResource, ByMirror or Unmanaged.
	Managed string `json:"managed"`
	// Revision is the revision the snapshot records as applied, and Applied
	// when the host applied it (the newest apply of it in the history).
	Revision string     `json:"revision,omitempty"`
	Applied  *time.Time `json:"applied,omitempty"`
	// Resource is the resource that manages the path: the Directory, for
	// a mirror entry.
	Resource *Resource `json:"resource,omitempty"`
	// Entry is the mirror entry's source, for a mirror entry.
	Entry *Entry `json:"entry,omitempty"`
	// Container is the nearest managed directory above an unmanaged path.
	Container *Container `json:"container,omitempty"`
	// Deletion says whether a sync or a prune would delete the path.
	Deletion Deletion `json:"deletion"`
	// Backups are the copies of the path the state dir holds, newest first.
	Backups []state.Copy `json:"backups"`
	// Notes say what could not be read, and what is therefore missing.
	Notes []string `json:"notes,omitempty"`
}

// Resource is what the snapshot and the manifests say of a resource.
type Resource struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	Path string `json:"path"`
	// Manifest is where it is declared, at the applied revision; nil when
	// the manifests could not be read (see the notes).
	Manifest *Manifest `json:"manifest,omitempty"`
	// Source is the repository path its content comes from (a File's
	// source, a Directory's mirror), and SourceChange the commit that last
	// changed it.
	Source       string         `json:"source,omitempty"`
	SourceChange *source.Change `json:"sourceChange,omitempty"`
	// LastApply is the last change cortex-sync made to it here (or found
	// it as desired): action, time, error; Revision is the one the host
	// was on then, from the history. Nil when the inventory does not hold
	// it.
	LastApply *Apply `json:"lastApply,omitempty"`
	// Created: cortex-sync created it (a prune deletes only those).
	Created bool `json:"created"`
	// NoPrune: annotated cortex-sync/prune: disabled.
	NoPrune bool `json:"noPrune,omitempty"`
	// DependsOn is what it came after when applied (explicit and implied);
	// RequiredBy what came after it; Notifies what a change to it restarts
	// or runs again (restartOn, refreshOn).
	DependsOn  []string `json:"dependsOn"`
	RequiredBy []string `json:"requiredBy"`
	Notifies   []string `json:"notifies"`
}

// Manifest is where a resource is declared, and the commit that last
// changed that file.
type Manifest struct {
	File   string         `json:"file"` // slash path from the repository's top
	Line   int            `json:"line"`
	Doc    int            `json:"document"`
	Change *source.Change `json:"change,omitempty"`
}

// Apply is the last apply of a resource here.
type Apply struct {
	Action   string    `json:"action"`
	Time     time.Time `json:"time"`
	Error    string    `json:"error,omitempty"`
	Revision string    `json:"revision,omitempty"`
}

// Entry is a mirror entry: the repository path it is copied from and the
// commit that last changed it.
type Entry struct {
	Source string         `json:"source"`
	Change *source.Change `json:"change,omitempty"`
}

// Container is the nearest managed directory above an unmanaged path.
type Container struct {
	ID   string `json:"id"`
	Path string `json:"path"`
	// Mirror: it mirrors a repository directory; Purge: it deletes what
	// nothing manages inside it.
	Mirror bool `json:"mirror"`
	Purge  bool `json:"purge"`
}

// Deletion says whether cortex-sync would delete the path, and why.
type Deletion struct {
	// Sync: the next sync deletes it (purge: true, ensure: absent).
	Sync bool `json:"sync"`
	// Prune: sync --prune deletes it once its resource leaves Git.
	Prune bool   `json:"prune"`
	Why   string `json:"why"`
}

// Input is what explain reads: the snapshot, the state dir (its Git cache
// and backups), and how the host loads manifests.
type Input struct {
	Root     string // --root, absolute
	State    state.Dir
	Snapshot *state.Snapshot
	Options  resource.Options
	Kinds    resource.Kinds
	// Recall rebuilds a resource from its inventory entry, when the
	// manifests cannot be read.
	Recall func(*state.Entry) (*resource.Resource, error)
}

// ErrPath reports a path explain cannot answer for.
var ErrPath = errors.New("cannot explain this path")

// Explain says what cortex-sync knows of the host path p.
func Explain(in Input, p string) (*Explanation, error) {
	inRoot, err := InRoot(in.Root, p)
	if err != nil {
		return nil, err
	}
	snap := in.Snapshot
	x := &Explanation{Path: filepath.Clean(p), InRoot: inRoot, Revision: snap.Revision, Backups: []state.Copy{}}
	if a := snap.Latest(snap.Revision); a != nil && snap.Revision != "" {
		t := a.AppliedAt
		x.Applied = &t
	}
	d := in.desired(x)
	defer d.close()

	if r := d.set.ClaimedBy(inRoot); r != nil {
		x.Managed = ByResource
		x.Resource = d.resource(in, r, inRoot)
		x.Deletion = deletion(r, x.Resource)
	} else if r, at := d.ancestor(inRoot); r != nil {
		d.inside(in, x, r, at)
	} else {
		x.Managed = Unmanaged
		x.Deletion.Why = "nothing cortex-sync manages contains it: no sync or prune touches it"
		if d.set.ManagesWithin(inRoot, "") {
			x.Deletion.Why = "cortex-sync manages paths below it: it creates it (0755) when missing, and never deletes it"
		}
	}
	d.resolve(x)
	if x.Backups, err = in.State.BackupsOf(inRoot); err != nil {
		x.Notes = append(x.Notes, fmt.Sprintf("backups: %v", err))
	}
	if x.Backups == nil {
		x.Backups = []state.Copy{}
	}
	return x, nil
}

// InRoot is the in-root path of the absolute host path p under root.
func InRoot(root, p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: %q is a relative path; give the absolute host path (e.g. %s)", ErrPath, p, filepath.Join(root, "etc/motd"))
	}
	rel, err := filepath.Rel(root, filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: %s is outside --root %s; cortex-sync manages nothing there (give a path below %s, or the --root the host runs with)", ErrPath, p, root, root)
	}
	if rel == "." {
		return "/", nil
	}
	return "/" + filepath.ToSlash(rel), nil
}

// desired is the desired state as applied: the manifests of the
// snapshot's revision from the Git cache, or, when they cannot be read,
// the resources the snapshot recalls (without origins).
type desired struct {
	set     *resource.Set
	history *source.History // nil: no Git history
	tree    source.Tree     // the revision's tree, with history
	loaded  bool            // the set came from the manifests
	wanted  []wanted        // the paths whose last change is asked for
}

// wanted is a path whose last change goes into into.
type wanted struct {
	path string
	into **source.Change
}

func (d *desired) close() {
	if d.tree != nil {
		d.tree.Close()
	}
	if d.history != nil {
		d.history.Close()
	}
}

func (in Input) desired(x *Explanation) *desired {
	snap := in.Snapshot
	d := &desired{}
	switch {
	case snap.Source.Type != "git":
		x.Notes = append(x.Notes, fmt.Sprintf("the source is a directory (%s): no manifest lines and no commits, only what the snapshot records", orNone(snap.Source.URL)))
	case snap.Revision == "":
		x.Notes = append(x.Notes, "the snapshot records no revision applied in full: no manifest lines and no commits")
	default:
		d.load(in, x)
	}
	if d.set == nil {
		var list []*resource.Resource
		for _, e := range snap.Inventory {
			if r, err := in.Recall(e); err == nil {
				list = append(list, r)
			}
		}
		d.set = resource.Recalled(list)
	}
	return d
}

// load reads the revision's manifests from the Git cache.
func (d *desired) load(in Input, x *Explanation) {
	snap := in.Snapshot
	h, err := source.OpenHistory(in.State.Sub("cache"), snap.Source.URL, snap.Revision)
	if err != nil {
		x.Notes = append(x.Notes, fmt.Sprintf("the Git cache: %v; no manifest lines and no commits, only what the snapshot records", err))
		return
	}
	tree, err := h.Tree()
	if err != nil {
		h.Close()
		x.Notes = append(x.Notes, fmt.Sprintf("the Git cache: %s: %v", snap.Revision, err))
		return
	}
	d.history, d.tree = h, tree
	dir := snap.Source.Path
	if dir == "" {
		dir = "."
	}
	set, err := in.Options.Load(tree, dir, in.Kinds)
	if err != nil {
		x.Notes = append(x.Notes, fmt.Sprintf("the manifests of %s do not load here now (%s); only what the snapshot records", snap.Revision, firstLine(err.Error())))
		return
	}
	d.set, d.loaded = set, true
}

// ancestor is the resource claiming the nearest directory above p, and
// that directory.
func (d *desired) ancestor(p string) (*resource.Resource, string) {
	for dir := p; dir != "/"; {
		dir = path.Dir(dir)
		if r := d.set.ClaimedBy(dir); r != nil {
			return r, dir
		}
	}
	return nil, ""
}

// The facts explain reads of a spec, whatever its kind.
type (
	sourced interface{ SourcePath() string }
	purger  interface{ Purges() bool }
)

// inside explains p below the directory at that r claims.
func (d *desired) inside(in Input, x *Explanation, r *resource.Resource, at string) {
	mirror := false
	for _, c := range r.Spec.Claims() {
		if c.Path == at && c.Tree {
			mirror = true
		}
	}
	src := ""
	if s, ok := r.Spec.(sourced); ok {
		src = s.SourcePath()
	}
	purge := false
	if s, ok := r.Spec.(purger); ok {
		purge = s.Purges()
	}
	rel := strings.TrimPrefix(x.InRoot, strings.TrimSuffix(at, "/")+"/")
	if mirror && src != "" && d.loaded && d.inTree(path.Join(src, rel)) {
		x.Managed = ByMirror
		x.Resource = d.resource(in, r, at)
		x.Entry = &Entry{Source: path.Join(src, rel)}
		d.want(x.Entry.Source, &x.Entry.Change)
		x.Deletion = deletion(r, x.Resource)
		x.Deletion.Why = fmt.Sprintf("a sync deletes it once %s leaves Git; %s", x.Entry.Source, x.Deletion.Why)
		if x.Deletion.Prune {
			x.Deletion.Why += " (what cortex-sync wrote in it)"
		}
		return
	}
	x.Managed = Unmanaged
	x.Container = &Container{ID: string(r.ID()), Path: at, Mirror: mirror, Purge: purge}
	switch {
	case mirror && !d.loaded:
		x.Deletion.Why = fmt.Sprintf("inside the mirror of %s; whether Git holds it cannot be told without the manifests", r.ID())
		x.Deletion.Sync = purge
	case purge:
		x.Deletion.Sync = true
		x.Deletion.Why = fmt.Sprintf("%s has purge: true and nothing manages it: the next sync deletes it (backed up first)", r.ID())
	case mirror:
		x.Deletion.Why = fmt.Sprintf("not in the mirror of %s, which keeps what cortex-sync did not write (no purge): no sync or prune deletes it", r.ID())
	default:
		x.Deletion.Why = fmt.Sprintf("%s manages the directory, not what is in it: no sync or prune deletes it", r.ID())
	}
}

// inTree reports whether the revision's tree holds p.
func (d *desired) inTree(p string) bool {
	if l, ok := d.tree.(interface {
		Lstat(string) (fs.FileInfo, error)
	}); ok {
		_, err := l.Lstat(p)
		return err == nil
	}
	_, err := fs.Stat(d.tree, p)
	return err == nil
}

// want asks for the commit that last changed p, into *into: every path
// is looked for in one walk of the history (resolve).
func (d *desired) want(p string, into **source.Change) {
	if d.history != nil {
		d.wanted = append(d.wanted, wanted{p, into})
	}
}

// resolve walks the history once for every path wanted.
func (d *desired) resolve(x *Explanation) {
	if len(d.wanted) == 0 {
		return
	}
	paths := make([]string, len(d.wanted))
	for i, w := range d.wanted {
		paths[i] = w.path
	}
	changes, err := d.history.LastChanges(paths, HistoryLimit)
	if err != nil {
		x.Notes = append(x.Notes, fmt.Sprintf("the history of %s: %v", strings.Join(paths, ", "), err))
		return
	}
	for i, w := range d.wanted {
		*w.into = &changes[i]
	}
}

// resource says what the manifests and the snapshot say of r, which
// claims at.
func (d *desired) resource(in Input, r *resource.Resource, at string) *Resource {
	snap := in.Snapshot
	id := r.ID()
	out := &Resource{ID: string(id), Kind: r.Kind, Path: at, DependsOn: []string{}, RequiredBy: []string{}, Notifies: []string{}}
	if d.loaded {
		out.Manifest = &Manifest{File: r.Origin.File, Line: r.Origin.Line, Doc: r.Origin.Doc}
		d.want(r.Origin.File, &out.Manifest.Change)
	}
	if s, ok := r.Spec.(sourced); ok && s.SourcePath() != "" {
		out.Source = s.SourcePath()
		if d.loaded {
			d.want(out.Source, &out.SourceChange)
		}
	}
	if e := snap.Find(string(id)); e != nil {
		out.Created, out.NoPrune = e.Created, e.NoPrune
		out.DependsOn = append(out.DependsOn, e.DependsOn...)
		if e.Result != nil {
			out.LastApply = &Apply{Action: e.Result.Action, Time: e.Result.Time, Error: e.Result.Error, Revision: onAt(snap, e.Result.Time)}
		}
	}
	notifies := map[string]bool{}
	for _, q := range d.set.Resources() {
		if req, ok := q.Spec.(resource.Requirer); ok && slices.Contains(req.Requires(), id) {
			notifies[string(q.ID())] = true
			out.Notifies = append(out.Notifies, string(q.ID()))
		}
	}
	for _, e := range snap.Inventory {
		if slices.Contains(e.DependsOn, string(id)) && !notifies[e.ID] {
			out.RequiredBy = append(out.RequiredBy, e.ID)
		}
	}
	slices.Sort(out.DependsOn)
	slices.Sort(out.RequiredBy)
	slices.Sort(out.Notifies)
	return out
}

// onAt is the revision the host was on at t: the newest apply in the
// history at or before it.
func onAt(snap *state.Snapshot, t time.Time) string {
	for i := len(snap.History) - 1; i >= 0; i-- {
		if a := snap.History[i]; !a.AppliedAt.After(t) {
			return a.Revision
		}
	}
	return ""
}

// deletion says when cortex-sync deletes what r manages.
func deletion(r *resource.Resource, res *Resource) Deletion {
	switch {
	case isAbsent(r):
		return Deletion{Sync: true, Why: fmt.Sprintf("%s (ensure: absent): every sync deletes it", r.ID())}
	case res.LastApply == nil:
		return Deletion{Why: fmt.Sprintf("%s is not in this host's inventory yet: a prune would not delete it", r.ID())}
	case res.NoPrune || r.PruneDisabled():
		return Deletion{Why: fmt.Sprintf("%s is annotated cortex-sync/prune: disabled: it stays when it leaves Git", r.ID())}
	case !res.Created:
		return Deletion{Why: fmt.Sprintf("%s existed before cortex-sync took it over: a prune forgets it and leaves it", r.ID())}
	}
	return Deletion{Prune: true, Why: fmt.Sprintf("%s, which cortex-sync created: sync --prune deletes it once it leaves Git", r.ID())}
}

// isAbsent reports a resource declared ensure: absent (the kinds that
// have ensure say so).
func isAbsent(r *resource.Resource) bool {
	e, ok := r.Spec.(interface{ Absent() bool })
	return ok && e.Absent()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
