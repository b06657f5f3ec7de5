package resource

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/vars"
)

// checkVars validates a rule's vars and varsFiles.
func (f *Fleet) checkVars(field string, rule HostRule, report func(int, string, string)) {
	for _, k := range slices.Sorted(maps.Keys(rule.Vars)) {
		vf := field + ".vars." + k
		if msg := vars.CheckName(k); msg != "" {
			report(f.line(vf), vf, msg)
		}
	}
	for j, p := range rule.VarsFiles {
		vf := fmt.Sprintf("%s.varsFiles[%d]", field, j)
		if msg := varsFileProblem(p); msg != "" {
			report(f.line(vf), vf, msg)
		}
	}
}

// varsFileProblem says what is wrong with a rule's vars file path, or "".
func varsFileProblem(p string) string {
	if msg := pathText(p); msg != "" {
		return msg
	}
	if p == "" {
		return "is empty; name a file of the repository, e.g. vars/common.yaml"
	}
	for _, ph := range placeholderRE.FindAllString(p, -1) {
		if ph != NamePlaceholder {
			return fmt.Sprintf("%q: %s is not a placeholder; only {name} (the host's name) is", p, ph)
		}
	}
	clean := path.Clean(p)
	if path.IsAbs(p) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return fmt.Sprintf("%q must be a file inside the repository, relative to its top", p)
	}
	return ""
}

// HostVars are the variables of a host without a Fleet manifest: its
// facts alone.
func HostVars(h Host) *vars.Set {
	s := vars.NewSet(h.Name)
	vars.AddFacts(s, vars.Facts{Name: h.Name, Labels: h.Labels, MachineID: h.MachineID, Hostname: vars.Hostname()})
	return s
}

// Vars are the variables host h has from this Fleet. Its facts come
// first and cannot be overridden; then every rule that matches h, in
// order, gives its vars, then its varsFiles from the last to the first.
// The first definition of a name wins: an earlier rule beats a later one
// (as the first matching rule gives the paths, a catch-all rule at the
// end gives defaults), a rule's vars beat its files, and a later file
// beats an earlier one (vars/common.yaml, then vars/{name}.yaml).
// Problems name fleet.yaml's line and field, and the vars file's line. An
// encrypted vars file, on a host without a key (decrypt nil), gives its
// names locked: a rendering that uses one fails, naming it.
func (f *Fleet) Vars(tree fs.FS, h Host, decrypt vars.Decrypt) (*vars.Set, error) {
	s := HostVars(h)
	var errs Problems
	for i, rule := range f.Spec.Hosts {
		if !f.Matches(i, h) {
			continue
		}
		from := fmt.Sprintf("%s rule %d", FleetFile, i+1)
		for _, k := range slices.Sorted(maps.Keys(rule.Vars)) {
			s.Add(k, vars.Value{Text: rule.Vars[k], From: from})
		}
		for j := len(rule.VarsFiles) - 1; j >= 0; j-- {
			field := fmt.Sprintf("spec.hosts[%d].varsFiles[%d]", i, j)
			fail := func(err error, msg string) {
				errs = append(errs, &varsError{FieldError: &FieldError{Origin: f.Origin, Line: f.line(field), ID: NewID(FleetKind, f.Name), Field: field, Msg: msg}, err: err})
			}
			p := cleanDir(strings.ReplaceAll(rule.VarsFiles[j], NamePlaceholder, h.Name))
			data, err := readLimited(tree, p, DefaultLimits.FileBytes)
			switch {
			case errors.Is(err, fs.ErrNotExist) && strings.Contains(rule.VarsFiles[j], NamePlaceholder):
				continue // no file of this host's own
			case errors.Is(err, fs.ErrNotExist):
				fail(err, fmt.Sprintf("%q is not a file of the repository; create it or fix the path", p))
				continue
			case err != nil:
				fail(err, err.Error())
				continue
			}
			if decrypt == nil && vars.IsSOPS(data) {
				// No key on this host: the names are defined, locked; only
				// a resource that uses one fails.
				lines, err := vars.ParseLocked(p, data)
				if err != nil {
					fail(err, strings.ReplaceAll(err.Error(), "\n", "; "))
					continue
				}
				for _, k := range slices.Sorted(maps.Keys(lines)) {
					s.Add(k, vars.Value{Secret: true, Locked: true, From: p})
				}
				continue
			}
			values, _, secret, err := vars.ParseFile(p, data, decrypt)
			if err != nil {
				fail(err, strings.ReplaceAll(err.Error(), "\n", "; "))
				continue
			}
			for _, k := range slices.Sorted(maps.Keys(values)) {
				s.Add(k, vars.Value{Text: values[k], Secret: secret, From: p})
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return s, nil
}

// varsError is a problem with a host's variables; it wraps the cause
// (vars.ErrNoDecrypt for an encrypted file and no key).
type varsError struct {
	*FieldError
	err error
}

func (e *varsError) Unwrap() []error { return []error{e.FieldError, e.err} }

// hostVars are the variables a load renders with, read once, when a
// resource first asks for substitution.
type hostVars struct {
	o    Options
	tree fs.FS
	done bool
	set  *vars.Set
	err  error
}

// get is the set; nil after an error (kept in err).
func (hv *hostVars) get() *vars.Set {
	if !hv.done {
		hv.done = true
		h := hostOrThis(hv.o.Host)
		switch {
		case hv.o.Vars != nil:
			hv.set = hv.o.Vars
		case hv.o.fleet != nil:
			hv.set, hv.err = hv.o.fleet.Vars(hv.tree, h, hv.o.Decrypt)
		default:
			hv.set = HostVars(h)
		}
	}
	return hv.set
}
