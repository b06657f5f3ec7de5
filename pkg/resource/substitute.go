package resource

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/cortex-sync/cortex-sync/pkg/vars"
)

// MaxTemplateBytes bounds a file rendered by substitution (a File's
// source, each file of a Directory's): it is rendered in memory.
const MaxTemplateBytes = 1 << 20

// Substitution is what rendering a resource for this host used, so that
// a change of a variable is told from a change in Git.
type Substitution struct {
	// Template names the resource as written in Git, before rendering:
	// its spec and the files it rendered.
	Template string
	// Used are the variables the rendering used.
	Used vars.Used
}

// Substituted is r's substitution; nil when its spec does not ask for one.
func (r *Resource) Substituted() *Substitution { return r.subst }

// Substitutes reports whether the spec asks for substitution.
func (v *Validation) Substitutes() bool {
	return v.Resource.Spec != nil && v.Resource.Spec.Common().Substitute
}

// Secret reports whether a rendering so far used a secret variable: what
// the resource holds must then be treated as sensitive.
func (v *Validation) Secret() bool { return v.subst != nil && v.subst.Used.Secret() }

// Substitutable says the kind has something to render, though this
// spec may not (a File declared absent): substitute: true is not refused.
func (v *Validation) Substitutable() {
	if v.Substitutes() {
		v.begin()
	}
}

// begin starts the record of a rendering.
func (v *Validation) begin() *Substitution {
	v.asked = true
	if v.subst == nil {
		v.subst = &Substitution{Used: vars.Used{}}
	}
	return v.subst
}

// Substitute renders text, the value of a spec field ("spec.content",
// "spec.env.DB"), with the host's variables when the spec says
// substitute: true; otherwise text is returned as is. A problem is
// reported at the manifest's line of the reference, naming the field,
// the variable and the host; then text is returned.
func (v *Validation) Substitute(field, text string) string {
	if !v.Substitutes() {
		return text
	}
	s := v.begin()
	out, used, err := vars.Render(text, v.vars)
	if err != nil {
		start, block := v.valueLine(field)
		for _, e := range templateErrors(err) {
			line := start + e.Line - 1
			if block {
				line = start + e.Line
			}
			v.report(line, field, e.Msg)
		}
		return text
	}
	s.Used.Merge(used)
	return out
}

// SubstituteSource reads the repository file p (the resolved value of
// field, as SourcePath gives it) and renders it. ok is false after a
// problem was reported: the file is too large, unreadable, not UTF-8,
// or its template is bad (named with its own line and column).
func (v *Validation) SubstituteSource(field, p string) (string, bool) {
	s := v.begin()
	data, err := readLimited(v.Source, p, MaxTemplateBytes)
	var le *LimitError
	switch {
	case errors.As(err, &le):
		v.Errorf(field, "%s is larger than the %d bytes a substituted file may hold; leave substitute off for it", p, MaxTemplateBytes)
		return "", false
	case err != nil:
		v.Errorf(field, "%s: %v", p, unwrapPath(err))
		return "", false
	}
	if err := checkUTF8(p, data); err != nil {
		var fe *FieldError
		errors.As(err, &fe)
		v.Errorf(field, "%s:%d: %s; a substituted file must be text", p, fe.Line, fe.Msg)
		return "", false
	}
	out, used, err := vars.Render(string(data), v.vars)
	if err != nil {
		for _, e := range templateErrors(err) {
			v.Errorf(field, "%s:%d:%d: %s", p, e.Line, e.Column, e.Msg)
		}
		return "", false
	}
	h := sha256.Sum256(data)
	s.Template += p + "\x00" + hex.EncodeToString(h[:]) + "\x00"
	s.Used.Merge(used)
	return out, true
}

// MaxTreeBytes bounds the text a substituted Directory renders in all: it
// is held in memory, beside the manifests, while they are loaded.
const MaxTreeBytes = 16 << 20

// SubstituteTree renders every regular file below the repository folder
// p for this host: files holds each one's text by its repository path. ok
// is false after a problem was reported. At most maxFiles files are read,
// each within MaxTemplateBytes, MaxTreeBytes in all.
func (v *Validation) SubstituteTree(field, p string, maxFiles int) (files map[string]string, ok bool) {
	v.begin()
	files = map[string]string{}
	ok = true
	n, total := 0, 0
	err := fs.WalkDir(v.Source, p, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == ".git" && d.IsDir() {
			return fs.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if n++; n > maxFiles {
			return fmt.Errorf("more than %d files; a substituted Directory may hold at most %d", maxFiles, maxFiles)
		}
		out, good := v.SubstituteSource(field, name)
		if !good {
			ok = false
			return nil
		}
		if total += len(out); total > MaxTreeBytes {
			return fmt.Errorf("more than %d bytes rendered; a substituted Directory may hold at most %d in all", MaxTreeBytes, MaxTreeBytes)
		}
		files[name] = out
		return nil
	})
	if err != nil {
		v.Errorf(field, "%s: %v", p, unwrapPath(err))
		return nil, false
	}
	return files, ok
}

// templateErrors are the *vars.Error of a rendering.
func templateErrors(err error) []*vars.Error {
	var all vars.Errors
	if !errors.As(err, &all) {
		all = vars.Errors{err}
	}
	var out []*vars.Error
	for _, e := range all {
		var ve *vars.Error
		if errors.As(e, &ve) {
			out = append(out, ve)
		}
	}
	return out
}

// valueLine is the manifest line where field's value starts, and whether
// it is a block scalar (| or >: its text starts on the next line).
func (v *Validation) valueLine(field string) (int, bool) {
	n := v.node
	for _, part := range fieldParts(strings.TrimPrefix(field, "spec")) {
		if n == nil {
			break
		}
		switch {
		case part.index >= 0 && n.Kind == yaml.SequenceNode && part.index < len(n.Content):
			n = n.Content[part.index]
		case part.index < 0 && n.Kind == yaml.MappingNode:
			var next *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == part.key {
					next = n.Content[i+1]
				}
			}
			n = next
		default:
			n = nil
		}
	}
	if n == nil {
		return v.Resource.Line(field), false
	}
	return n.Line, n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0
}

type fieldPart struct {
	key   string
	index int // -1 for a key
}

// fieldParts splits ".env.DB" or ".command[2]" into its steps.
func fieldParts(f string) []fieldPart {
	var out []fieldPart
	for _, seg := range strings.Split(strings.TrimPrefix(f, "."), ".") {
		if seg == "" {
			continue
		}
		key, rest, _ := strings.Cut(seg, "[")
		if key != "" {
			out = append(out, fieldPart{key: key, index: -1})
		}
		for rest != "" {
			num, after, _ := strings.Cut(rest, "]")
			i, err := strconv.Atoi(num)
			if err != nil {
				break
			}
			out = append(out, fieldPart{index: i})
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return out
}

// finishSubstitution closes the record of r's rendering: a spec that says
// substitute: true but whose kind renders nothing is refused.
func (v *Validation) finishSubstitution(specNode *yaml.Node) {
	if !v.Substitutes() {
		return
	}
	if !v.asked {
		v.Errorf("spec.substitute", "a %s has nothing to substitute; substitute: true is for a File, a Directory with a source, a Process or a Command", v.Resource.Kind)
		return
	}
	raw, _ := yaml.Marshal(specNode)
	h := sha256.Sum256(append(raw, v.subst.Template...))
	v.subst.Template = hex.EncodeToString(h[:])
	v.Resource.subst = v.subst
}
