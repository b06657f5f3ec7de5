package driver

import (
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/vars"
)

// Substitution (substitute: true) is rendered when the manifests load, for
// this host: what a File writes, a Directory mirrors and a program's
// environment holds is the rendered text, so every driver compares,
// names and shows the rendered result. The record keeps what the
// rendering used (state.Entry.Vars) so that a change of a variable is
// told apart from a change in Git.

// substitute renders a File's content, or its source (which it then holds
// as content: the rendered bytes, named by their own digest). A secret
// variable makes the File sensitive, and it holds a secret (0600 unless
// its mode is given, as a decrypted File).
func (s *FileSpec) substitute(v *resource.Validation) {
	if !v.Substitutes() {
		return
	}
	v.Substitutable() // even a File declared absent
	switch {
	case s.Ensure.Absent(), s.Decrypt != "": // decrypt and substitute are refused
	case s.Content != nil:
		out := v.Substitute("spec.content", *s.Content)
		s.Content = &out
	case s.sourcePath != "":
		if out, ok := v.SubstituteSource("spec.source", s.sourcePath); ok {
			s.Content = &out
		}
	}
	if v.Secret() {
		s.Sensitive, s.secretVars = true, true
	}
}

// substitute renders a program's env values and command arguments. A
// secret variable is refused there: both are recorded and shown.
func (x *Exec) substitute(v *resource.Validation) {
	if !v.Substitutes() {
		return
	}
	for i, a := range x.Command {
		x.Command[i] = v.Substitute("spec.command["+strconv.Itoa(i)+"]", a)
	}
	for _, k := range slices.Sorted(maps.Keys(x.Env)) {
		x.Env[k] = v.Substitute("spec.env."+k, x.Env[k])
	}
	if v.Secret() {
		v.Errorf("spec.substitute", "a secret variable (from an encrypted vars file) cannot be used in env or command: they are recorded and shown; give it through secretEnv or a File with substitute: true")
	}
}

// MaxSubstitutedFiles bounds a substituted Directory: its files are
// rendered in memory when the manifests load (each within
// resource.MaxTemplateBytes).
const MaxSubstitutedFiles = 1000

// substitute renders every file of a mirrored tree.
func (s *DirectorySpec) substitute(v *resource.Validation) {
	if !v.Substitutes() {
		return
	}
	if s.sourcePath == "" {
		v.Substitutable() // refused below, or declared absent
		if !s.Ensure.Absent() && s.Source == "" {
			v.Errorf("spec.substitute", "a Directory without a source has nothing to substitute")
		}
		return
	}
	files, ok := v.SubstituteTree("spec.source", s.sourcePath, MaxSubstitutedFiles)
	if !ok {
		return
	}
	if v.Secret() {
		v.Errorf("spec.substitute", "a secret variable (from an encrypted vars file) cannot be used in a Directory: its index names each file's content unkeyed; render the secret into a File with substitute: true")
		return
	}
	s.rendered = files
}

// renderedEnv is env with the Directory's source seen rendered.
func (s *DirectorySpec) renderedEnv(env *Env) *Env {
	if s == nil || s.rendered == nil || env.recalled() {
		return env
	}
	cp := *env
	cp.Tree = &renderedTree{Tree: env.Tree, files: s.rendered}
	return &cp
}

// renderedTree is a tree whose files named in files hold the rendered
// text instead: their content ID is the digest of those bytes. It has
// none of the shortcuts of the tree it wraps (Git tree IDs, stats
// later), which would speak of the template.
type renderedTree struct {
	source.Tree
	files map[string]string // repository path → rendered text
}

func (t *renderedTree) Open(name string) (fs.File, error) {
	text, ok := t.files[path.Clean(name)]
	if !ok {
		return t.Tree.Open(name)
	}
	fi, err := fs.Stat(t.Tree, name)
	if err != nil {
		return nil, err
	}
	return &renderedFile{Reader: strings.NewReader(text), info: renderedInfo{fi, int64(len(text))}}, nil
}

// Lstat is the tree's, with a rendered file's size.
func (t *renderedTree) Lstat(name string) (fs.FileInfo, error) {
	fi, err := fs.Lstat(t.Tree, name)
	if err != nil {
		return nil, err
	}
	if text, ok := t.files[path.Clean(name)]; ok && fi.Mode().IsRegular() {
		return renderedInfo{fi, int64(len(text))}, nil
	}
	return fi, nil
}

// ReadLink is the tree's: a scoped walk reads links through it.
func (t *renderedTree) ReadLink(name string) (string, error) { return fs.ReadLink(t.Tree, name) }

func (t *renderedTree) ContentID(name string) (string, error) {
	if text, ok := t.files[path.Clean(name)]; ok {
		return source.ContentDigest([]byte(text)), nil
	}
	return t.Tree.ContentID(name)
}

func (t *renderedTree) Walk(dir string, fn func(source.Entry) error) error {
	return t.Tree.Walk(dir, func(e source.Entry) error {
		text, ok := t.files[path.Join(dir, e.Path)]
		if !ok || !e.Mode.IsRegular() {
			return fn(e)
		}
		r := source.Entry{Path: e.Path, Mode: e.Mode, Size: int64(len(text))}
		e.Release() // the rendered entry holds nothing of it
		id := source.ContentDigest([]byte(text))
		r.ContentID = func() (string, error) { return id, nil }
		r.Open = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(text)), nil }
		return fn(r)
	})
}

// renderedFile is a rendered file opened through the tree's fs.FS.
type renderedFile struct {
	*strings.Reader
	info renderedInfo
}

func (f *renderedFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *renderedFile) Close() error               { return nil }

// renderedInfo is a template's stat with the rendered size.
type renderedInfo struct {
	fs.FileInfo
	size int64
}

func (i renderedInfo) Size() int64 { return i.size }

// renderedRecord is what the record keeps of a substituted resource's
// rendering: the template's digest and each variable's (keyed for a
// secret, so a short secret cannot be guessed from it).
func renderedRecord(env *Env, r *resource.Resource) (*state.Rendered, error) {
	sub := r.Substituted()
	if sub == nil {
		return nil, nil
	}
	rec := &state.Rendered{Template: sub.Template, Vars: map[string]string{}}
	for name, v := range sub.Used {
		d, err := env.keyedIf(v.Secret, vars.Digest(name, v))
		if err != nil {
			return nil, err
		}
		rec.Vars[name] = d
	}
	return rec, nil
}

// varsChanged names the variables whose change alone makes r differ from
// its record: the template is the same as when it was applied, and these
// variables' values are not. nil when the template changed too, or r is
// not substituted, or the record says nothing of its rendering.
func varsChanged(env *Env, r *resource.Resource, rec *state.Entry) []string {
	if r == nil || rec == nil || rec.Vars == nil {
		return nil
	}
	now, err := renderedRecord(env, r)
	if err != nil || now == nil || now.Template != rec.Vars.Template {
		return nil
	}
	var names []string
	for name, d := range now.Vars {
		if rec.Vars.Vars[name] != d {
			names = append(names, name)
		}
	}
	for name := range rec.Vars.Vars {
		if _, ok := now.Vars[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// markVarsChanged says a change is owed to the variables names, when only
// they changed: the resource's desired state, and the files of a tree
// that changed in Git, changed because of them.
func markVarsChanged(c *diff.Change, names []string) {
	if len(names) == 0 {
		return
	}
	c.Observed.VarsChanged = names
	for i := range c.Files {
		if c.Files[i].Reason == diff.ChangedInGit {
			c.Files[i].Reason = diff.VarsChanged
		}
	}
}
