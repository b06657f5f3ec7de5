package resource

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/cortex-sync/cortex-sync/pkg/vars"
)

// Validation is what a Spec's Validate reports into: it knows the resource,
// the repository tree and where the manifest lies in it.
type Validation struct {
	Resource *Resource
	Source   fs.FS  // the repository tree
	Dir      string // the manifest file's directory in Source
	report   func(line int, field, msg string)

	vars  *vars.Set     // the host's variables, for substitute: true
	node  *yaml.Node    // the spec as written, for the lines of its values
	subst *Substitution // what rendering used so far
	asked bool          // the spec rendered something
}

// Errorf reports a problem with field ("spec.mode").
func (v *Validation) Errorf(field, format string, args ...any) {
	v.report(v.Resource.Line(field), field, fmt.Sprintf(format, args...))
}

// AbsPath checks that p is an absolute, clean host path.
func (v *Validation) AbsPath(field, p string) {
	switch {
	case pathText(p) != "":
		v.Errorf(field, "%s", pathText(p))
	case p == "":
		v.Errorf(field, "is required")
	case !path.IsAbs(p):
		v.Errorf(field, "%q must be an absolute path", p)
	case strings.Contains("/"+p+"/", "/../"):
		v.Errorf(field, "%q must not contain \"..\"", p)
	case path.Clean(p) != p:
		v.Errorf(field, "%q is not clean; write %q", p, path.Clean(p))
	case p == "/":
		v.Errorf(field, "the root directory itself cannot be managed")
	}
}

// pathFields are the spec fields, by YAML name, that hold paths. The decoder
// refuses bytes no path can hold in them, so that the kinds which check a
// path by hand (a symlink's target, a working directory) need not remember to.
var pathFields = map[string]bool{"path": true, "source": true, "target": true, "workingDir": true, "creates": true}

func isPathField(field string) bool {
	return strings.HasPrefix(field, "spec.") && pathFields[field[strings.LastIndexByte(field, '.')+1:]]
}

// pathText says what makes p unfit to be a path, or "" when nothing does:
// the kernel ends a path at a NUL byte, and paths are shown, hashed and
// compared as UTF-8 text.
func pathText(p string) string {
	switch {
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Sprintf("%q contains a NUL byte, which no path can hold", p)
	case !utf8.ValidString(p):
		return fmt.Sprintf("%q is not valid UTF-8; write paths as UTF-8 text", p)
	}
	return ""
}

// OneOf checks a field against its allowed values.
func (v *Validation) OneOf(field, value string, allowed ...string) {
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	v.Errorf(field, "%q must be one of %s", value, strings.Join(allowed, ", "))
}

// SourcePath resolves rel (relative to the manifest's directory) to a path in
// the repository, checking that it stays inside it and is a directory (dir)
// or a regular file. It returns "" after reporting a problem.
func (v *Validation) SourcePath(field, rel string, dir bool) string {
	if rel == "" {
		v.Errorf(field, "is required")
		return ""
	}
	if msg := pathText(rel); msg != "" {
		v.Errorf(field, "%s", msg)
		return ""
	}
	if path.IsAbs(rel) {
		v.Errorf(field, "%q must be relative to the manifest's directory", rel)
		return ""
	}
	p := path.Join(v.Dir, rel)
	if p == ".." || strings.HasPrefix(p, "../") {
		v.Errorf(field, "%q leaves the repository", rel)
		return ""
	}
	fi, err := fs.Stat(v.Source, p)
	switch {
	case errors.Is(err, fs.ErrNotExist) && isSymlink(v.Source, p):
		v.Errorf(field, "%q is a symlink that leads out of the repository or to nothing", rel)
	case errors.Is(err, fs.ErrNotExist):
		v.Errorf(field, "%q does not exist in the repository%s", rel, lookedFor(rel, p))
	case err != nil:
		v.Errorf(field, "%q: %v", rel, unwrapPath(err))
	case dir && !fi.IsDir():
		v.Errorf(field, "%q is not a directory", rel)
	case !dir && !fi.Mode().IsRegular():
		v.Errorf(field, "%q is not a regular file", rel)
	default:
		return p
	}
	return ""
}

// unwrapPath drops the PathError's own path, which the caller already names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func isSymlink(fsys fs.FS, p string) bool {
	fi, err := fs.Lstat(fsys, p)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

func lookedFor(rel, p string) string {
	if rel == p {
		return ""
	}
	return " (looked for " + p + ")"
}
