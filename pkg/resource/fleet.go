package resource

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// FleetFile is the Fleet manifest: this file at the repository's top, of
// kind Fleet. A file of that name holding another kind is an ordinary
// manifest.
const FleetFile = "fleet.yaml"

// FleetKind is the Fleet manifest's kind.
const FleetKind = "Fleet"

// NamePlaceholder in a rule's path is replaced by the host's name.
const NamePlaceholder = "{name}"

// Host is what targeting knows of a host: its name (--host-name) and
// labels (--label k=v).
type Host struct {
	Name   string
	Labels map[string]string
	// MachineID is /etc/machine-id of the host (under --root), for
	// ${host.machineID}; "" when it has none.
	MachineID string
}

// Fleet is the decoded Fleet manifest: which paths each host runs, and how
// a new revision rolls out.
type Fleet struct {
	Name    string // metadata.name: the fleet's default name in etcd
	Spec    FleetSpec
	Origin  Origin
	lines   map[string]int
	ruleFor map[int]string // rule index → its field path, for errors
}

// FleetSpec is the Fleet manifest's spec.
type FleetSpec struct {
	// Hosts are matched in order; the first that matches a host decides.
	Hosts []HostRule `yaml:"hosts"`
	// Rollout gates a new revision across the fleet; without it every host
	// applies a new revision as soon as it fetches it.
	Rollout *Rollout `yaml:"rollout"`
}

// HostRule gives the hosts it matches their paths.
type HostRule struct {
	Match HostMatch `yaml:"match"`
	// Paths are folders of the repository whose manifests together are the
	// host's desired set; "{name}" stands for the host's name.
	Paths []string `yaml:"paths"`
	// Vars are variables for substitute: true, for every host the rule
	// matches (see docs/fleet.md, Variables).
	Vars map[string]string `yaml:"vars"`
	// VarsFiles are flat YAML files of variables in the repository, later
	// files overriding earlier ones; "{name}" stands for the host's name
	// (such a file may be missing). A file with a top-level sops key is
	// decrypted, and its values are secret.
	VarsFiles []string `yaml:"varsFiles"`
	// Windows are when the hosts this rule matches may take a new
	// revision; they replace the rollout's. None: the rollout's, if any.
	Windows Windows `yaml:"windows"`
}

// HostMatch selects hosts: all given conditions must hold; empty matches
// every host.
type HostMatch struct {
	Name   string            `yaml:"name"`   // a glob (path.Match) on the host name
	Labels map[string]string `yaml:"labels"` // each label must be present with this value
}

// Rollout is how a revision rolls out across the fleet.
type Rollout struct {
	// MaxUnavailable bounds the hosts applying the revision, or failed on
	// it, at once: a count, or a percentage of the live hosts (rounded
	// down, at least 1).
	MaxUnavailable IntOrPercent `yaml:"maxUnavailable" json:"maxUnavailable"`
	// Canary hosts go first, alone; the rest wait until they are good.
	Canary int `yaml:"canary" json:"canary"`
	// MinReady is how long a host's resources must stay healthy for the
	// revision to be good there.
	MinReady Duration `yaml:"minReady" json:"minReady"`
	// ProgressDeadline is how long a host may take to be good before the
	// revision is bad there; a host that reports nothing by then is
	// stalled and its slot goes to another.
	ProgressDeadline Duration `yaml:"progressDeadline" json:"progressDeadline"`
	// FailureThreshold bad hosts pause the revision's rollout fleet-wide.
	FailureThreshold int `yaml:"failureThreshold" json:"failureThreshold"`
	// Windows are when a host may take the revision (a rule's own
	// windows replace them). Outside them a host takes no slot and
	// blocks no one; it stays on its revision, healing it.
	Windows Windows `yaml:"windows" json:"windows,omitempty"`
}

// Rollout defaults, for fields a rollout: leaves out.
const (
	DefaultMaxUnavailable   = 1
	DefaultFailureThreshold = 1
)

// Defaults for a rollout's durations.
var (
	DefaultMinReady         = Duration(10e9)
	DefaultProgressDeadline = Duration(300e9)
)

// MaxRolloutDuration bounds minReady and progressDeadline: a week is
// past any rollout's patience, and keeps their sums from overflowing.
const MaxRolloutDuration = Duration(7 * 24 * time.Hour)

// RolloutProblem is what is wrong with one field of a rollout (Field as
// written in a rollout:, e.g. "canary").
type RolloutProblem struct {
	Field, Msg string
}

// RolloutError lists what is wrong with a rollout.
type RolloutError []RolloutProblem

func (e RolloutError) Error() string {
	parts := make([]string, len(e))
	for i, p := range e {
		parts[i] = p.Field + " " + p.Msg
	}
	return strings.Join(parts, "; ")
}

// Settle validates r and fills the fields left out with the defaults: the
// one rule for a rollout, whether it comes from fleet.yaml or from the
// copy a host recorded in etcd (which any member, of any version, may
// have written). A RolloutError says what is wrong.
func (r Rollout) Settle() (Rollout, error) {
	var errs RolloutError
	bad := func(field, msg string) { errs = append(errs, RolloutProblem{Field: field, Msg: msg}) }
	switch mu := r.MaxUnavailable; {
	case mu == (IntOrPercent{}):
		r.MaxUnavailable = IntOrPercent{Value: DefaultMaxUnavailable}
	case mu.Value < 1:
		bad("maxUnavailable", fmt.Sprintf("must be 1 or more, not %d", mu.Value))
	case mu.Percent && mu.Value > 100:
		bad("maxUnavailable", fmt.Sprintf("must be a percentage of at most 100%%, not %d%%", mu.Value))
	}
	if r.Canary < 0 {
		bad("canary", "must be 0 or more")
	}
	for _, d := range []struct {
		field string
		v     *Duration
		def   Duration
	}{{"minReady", &r.MinReady, DefaultMinReady}, {"progressDeadline", &r.ProgressDeadline, DefaultProgressDeadline}} {
		switch {
		case *d.v < 0:
			bad(d.field, "must not be negative")
		case *d.v > MaxRolloutDuration:
			bad(d.field, fmt.Sprintf("must be at most %s", MaxRolloutDuration.Std()))
		case *d.v == 0:
			*d.v = d.def
		}
	}
	switch {
	case r.FailureThreshold < 0:
		bad("failureThreshold", "must be 1 or more (0 takes the default, 1)")
	case r.FailureThreshold == 0:
		r.FailureThreshold = DefaultFailureThreshold
	}
	for i, w := range r.Windows {
		for _, p := range w.Problems() {
			bad(fmt.Sprintf("windows[%d].%s", i, p.Field), p.Msg)
		}
	}
	if len(errs) > 0 {
		return Rollout{}, errs
	}
	return r, nil
}

// IntOrPercent is a count ("3") or a percentage ("10%").
type IntOrPercent struct {
	Value   int
	Percent bool
}

// UnmarshalYAML reads 3 or "10%".
func (v *IntOrPercent) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be a count such as 2 or a percentage such as \"10%%\", not %s", describe(n))
	}
	p, err := ParseIntOrPercent(n.Value)
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// ParseIntOrPercent parses "3" or "10%".
func ParseIntOrPercent(s string) (IntOrPercent, error) {
	bad := fmt.Errorf("%q is neither a count such as 2 nor a percentage such as \"10%%\"", s)
	num, pct := strings.CutSuffix(s, "%")
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || pct && n > 100 {
		return IntOrPercent{}, bad
	}
	return IntOrPercent{Value: n, Percent: pct}, nil
}

// Of is the count for total hosts: a percentage rounds down, to at least 1.
func (v IntOrPercent) Of(total int) int {
	if !v.Percent {
		return v.Value
	}
	return max(1, int(math.Floor(float64(v.Value)*float64(total)/100)))
}

func (v IntOrPercent) String() string {
	if v.Percent {
		return strconv.Itoa(v.Value) + "%"
	}
	return strconv.Itoa(v.Value)
}

// MarshalText keeps the written form in JSON.
func (v IntOrPercent) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (v *IntOrPercent) UnmarshalText(b []byte) error {
	p, err := ParseIntOrPercent(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// ReadFleet reads the Fleet manifest at the top of tree: nil when there is
// none (no fleet.yaml, or one holding another kind of manifest). Problems
// name the file, line and field, as every manifest's do.
func ReadFleet(tree fs.FS) (*Fleet, error) {
	if fi, err := fs.Stat(tree, FleetFile); errors.Is(err, fs.ErrNotExist) || err == nil && !fi.Mode().IsRegular() {
		return nil, nil
	}
	data, err := readLimited(tree, FleetFile, DefaultLimits.FileBytes)
	if err != nil {
		return nil, Problems{err}
	}
	if err := checkUTF8(FleetFile, data); err != nil {
		return nil, Problems{err}
	}
	var docs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, Problems{&FieldError{Origin: Origin{File: FleetFile, Doc: len(docs) + 1}, Msg: yamlMessage(err)}}
		}
		if len(n.Content) > 0 && n.Content[0].Tag != "!!null" {
			docs = append(docs, n.Content[0])
		}
	}
	isFleet := func(n *yaml.Node) bool {
		for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "kind" && n.Content[i+1].Value == FleetKind {
				return true
			}
		}
		return false
	}
	if !slices.ContainsFunc(docs, isFleet) {
		return nil, nil
	}
	if len(docs) > 1 {
		return nil, Problems{&FieldError{Origin: Origin{File: FleetFile, Doc: 2}, Line: docs[1].Line,
			Msg: "fleet.yaml holds the Fleet manifest and nothing else; move the other documents to another file"}}
	}
	return decodeFleet(docs[0])
}

func decodeFleet(root *yaml.Node) (*Fleet, error) {
	f := &Fleet{Origin: Origin{File: FleetFile, Doc: 1, Line: root.Line}, lines: map[string]int{}}
	var errs Problems
	report := func(line int, field, msg string) {
		id := ID("")
		if f.Name != "" {
			id = NewID(FleetKind, f.Name)
		}
		errs = append(errs, &FieldError{Origin: f.Origin, Line: line, ID: id, Field: field, Msg: msg})
	}
	var doc struct {
		APIVersion string    `yaml:"apiVersion"`
		Kind       string    `yaml:"kind"`
		Metadata   Metadata  `yaml:"metadata"`
		Spec       FleetSpec `yaml:"spec"`
	}
	f.Name = nameOf(root) // for the ID in errors found before decoding
	s := &strict{lines: f.lines, report: report}
	s.check(root, reflect.TypeOf(doc), "")
	if len(errs) > 0 {
		return nil, errs
	}
	if err := root.Decode(&doc); err != nil {
		report(root.Line, "", yamlMessage(err))
		return nil, errs
	}
	f.Name, f.Spec = doc.Metadata.Name, doc.Spec
	if doc.APIVersion != APIVersion {
		report(f.line("apiVersion"), "apiVersion", fmt.Sprintf("%q is not supported; use %q", doc.APIVersion, APIVersion))
	}
	r := &Resource{Kind: FleetKind, Metadata: doc.Metadata, Origin: f.Origin, lines: f.lines}
	validateName(r, report)
	if len(f.Spec.Hosts) == 0 {
		report(f.line("spec.hosts"), "spec.hosts", "is required: list rules that give hosts their paths, e.g. - {match: {}, paths: [base]}")
	}
	f.ruleFor = map[int]string{}
	for i, rule := range f.Spec.Hosts {
		field := fmt.Sprintf("spec.hosts[%d]", i)
		f.ruleFor[i] = field
		if rule.Match.Name != "" {
			if _, err := path.Match(rule.Match.Name, ""); err != nil {
				report(f.line(field+".match.name"), field+".match.name", fmt.Sprintf("%q is not a glob: %v", rule.Match.Name, err))
			}
		}
		if len(rule.Paths) == 0 {
			report(f.line(field), field+".paths", "is required: the folders whose manifests this host runs")
		}
		for j, p := range rule.Paths {
			pf := fmt.Sprintf("%s.paths[%d]", field, j)
			if msg := rulePathProblem(p); msg != "" {
				report(f.line(pf), pf, msg)
			}
		}
		f.checkVars(field, rule, report)
		for k, w := range rule.Windows {
			wf := fmt.Sprintf("%s.windows[%d]", field, k)
			for _, p := range w.Problems() {
				report(f.line(wf+"."+p.Field), wf+"."+p.Field, p.Msg)
			}
		}
	}
	if ro := f.Spec.Rollout; ro != nil {
		var re RolloutError
		if _, err := ro.Settle(); errors.As(err, &re) {
			for _, p := range re {
				field := "spec.rollout." + p.Field
				report(f.line(field), field, p.Msg)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return f, nil
}

// nameOf is a document's metadata.name, if it has one.
func nameOf(root *yaml.Node) string {
	for i := 0; root.Kind == yaml.MappingNode && i+1 < len(root.Content); i += 2 {
		if md := root.Content[i+1]; root.Content[i].Value == "metadata" && md.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(md.Content); j += 2 {
				if md.Content[j].Value == "name" && md.Content[j+1].Kind == yaml.ScalarNode {
					return md.Content[j+1].Value
				}
			}
		}
	}
	return ""
}

var placeholderRE = regexp.MustCompile(`\{[^}]*\}`)

// rulePathProblem says what is wrong with a rule's path, or "".
func rulePathProblem(p string) string {
	if msg := pathText(p); msg != "" {
		return msg
	}
	for _, ph := range placeholderRE.FindAllString(p, -1) {
		if ph != NamePlaceholder {
			return fmt.Sprintf("%q: %s is not a placeholder; only {name} (the host's name) is", p, ph)
		}
	}
	clean := path.Clean(p)
	if path.IsAbs(p) || clean == ".." || strings.HasPrefix(clean, "../") {
		return fmt.Sprintf("%q must be a folder inside the repository, relative to its top", p)
	}
	return ""
}

func (f *Fleet) line(field string) int {
	r := &Resource{lines: f.lines, Origin: f.Origin}
	return r.Line(field)
}

// Matches reports whether rule i matches h.
func (f *Fleet) Matches(i int, h Host) bool {
	m := f.Spec.Hosts[i].Match
	if m.Name != "" {
		if ok, _ := path.Match(m.Name, h.Name); !ok {
			return false
		}
	}
	for k, v := range m.Labels {
		if got, ok := h.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Target is what the Fleet gives one host.
type Target struct {
	Rule  int      // index of the rule that matched
	Paths []string // the rule's paths with {name} replaced
}

// ErrNoRule is wrapped when no rule matches a host.
var ErrNoRule = errors.New("no fleet rule matches this host")

// Target picks the first rule that matches h and expands its paths. A
// host no rule matches is an error: an empty desired set would ask to
// remove everything.
func (f *Fleet) Target(h Host) (Target, error) {
	for i := range f.Spec.Hosts {
		if f.Matches(i, h) {
			paths := make([]string, len(f.Spec.Hosts[i].Paths))
			for j, p := range f.Spec.Hosts[i].Paths {
				paths[j] = cleanDir(strings.ReplaceAll(p, NamePlaceholder, h.Name))
			}
			return Target{Rule: i, Paths: paths}, nil
		}
	}
	return Target{}, noRuleError{&FieldError{Origin: f.Origin, Line: f.line("spec.hosts"), ID: NewID(FleetKind, f.Name), Field: "spec.hosts",
		Msg: fmt.Sprintf("%v: host %q%s; add a rule that matches it, or a last rule with match: {}", ErrNoRule, h.Name, labelText(h.Labels))}}
}

// WindowsFor are the deploy windows of host h: those of the rule that
// gives it its paths, else the rollout's when the host is in a fleet
// (inFleet: a rollout gates nothing without a coordinator). Which:
// "spec.hosts[i].windows" or "spec.rollout.windows", for messages.
func (f *Fleet) WindowsFor(h Host, inFleet bool) (ws Windows, which string) {
	t, err := f.Target(hostOrThis(h))
	if err != nil {
		return nil, ""
	}
	if ws := f.Spec.Hosts[t.Rule].Windows; len(ws) > 0 {
		return ws, f.ruleFor[t.Rule] + ".windows"
	}
	if ro := f.Spec.Rollout; inFleet && ro != nil && len(ro.Windows) > 0 {
		return ro.Windows, "spec.rollout.windows"
	}
	return nil, ""
}

// noRuleError is the FieldError of a host no rule matches; it is ErrNoRule.
type noRuleError struct{ *FieldError }

func (e noRuleError) Unwrap() []error { return []error{e.FieldError, ErrNoRule} }

func labelText(labels map[string]string) string {
	if len(labels) == 0 {
		return " (no labels)"
	}
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		kv = append(kv, k+"="+labels[k])
	}
	return " (labels " + strings.Join(kv, ", ") + ")"
}

// Templated reports whether rule i's path j holds {name}.
func (f *Fleet) Templated(i, j int) bool {
	return strings.Contains(f.Spec.Hosts[i].Paths[j], NamePlaceholder)
}

// Resolve is Target, checked against tree: a path written out that is not
// a folder of the repository is an error at its line in fleet.yaml; a
// {name} path that is not there gives the host nothing of its own.
func (f *Fleet) Resolve(tree fs.FS, h Host) (Target, error) {
	t, err := f.Target(h)
	if err != nil {
		return t, Problems{err}
	}
	t.Paths, err = f.RulePaths(tree, t.Rule, h.Name)
	return t, err
}

// RulePaths are rule i's paths for host name, checked against tree as
// Resolve checks them; with name "", its {name} paths are left out.
func (f *Fleet) RulePaths(tree fs.FS, i int, name string) ([]string, error) {
	var kept []string
	var errs Problems
	for j, p := range f.Spec.Hosts[i].Paths {
		templated := f.Templated(i, j)
		if templated && name == "" {
			continue
		}
		p = cleanDir(strings.ReplaceAll(p, NamePlaceholder, name))
		fi, err := fs.Stat(tree, p)
		switch {
		case err == nil && fi.IsDir():
			kept = append(kept, p)
		case templated && errors.Is(err, fs.ErrNotExist):
		default:
			field := fmt.Sprintf("%s.paths[%d]", f.ruleFor[i], j)
			errs = append(errs, &FieldError{Origin: f.Origin, Line: f.line(field), ID: NewID(FleetKind, f.Name), Field: field,
				Msg: fmt.Sprintf("%q is not a folder of the repository; create it or fix the path", p)})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return kept, nil
}

// Case is one desired set the Fleet can give: a rule, and for a rule with
// {name} paths, a host whose folder exists.
type Case struct {
	Rule int
	Host string // "" for a rule without {name} paths, or when no host folder exists
}

// Cases lists the desired sets to check for every host the Fleet can
// serve, known offline: each rule once, and a rule with {name} paths once
// per existing folder its name glob matches (a name an earlier rule takes
// by name alone is left to that rule).
func (f *Fleet) Cases(tree fs.FS) []Case {
	var out []Case
	for i, rule := range f.Spec.Hosts {
		names := map[string]bool{}
		for j, p := range rule.Paths {
			if !f.Templated(i, j) {
				continue
			}
			for _, n := range hostFolders(tree, p) {
				if ok, _ := path.Match(cmpOr(rule.Match.Name, "*"), n); ok && !f.takenEarlier(i, n) {
					names[n] = true
				}
			}
		}
		if len(names) == 0 {
			out = append(out, Case{Rule: i})
			continue
		}
		for _, n := range slices.Sorted(maps.Keys(names)) {
			out = append(out, Case{Rule: i, Host: n})
		}
	}
	return out
}

// takenEarlier reports whether a rule before i takes host name n whatever
// its labels.
func (f *Fleet) takenEarlier(i int, n string) bool {
	for k := range i {
		m := f.Spec.Hosts[k].Match
		if len(m.Labels) == 0 && f.Matches(k, Host{Name: n}) {
			return true
		}
	}
	return false
}

// hostFolders lists the host names for which template (with {name} in one
// component) names an existing folder.
func hostFolders(tree fs.FS, template string) []string {
	parts := strings.Split(cleanDir(template), "/")
	at := slices.IndexFunc(parts, func(s string) bool { return strings.Contains(s, NamePlaceholder) })
	if at < 0 {
		return nil
	}
	re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(parts[at]), regexp.QuoteMeta(NamePlaceholder), "(.+)") + "$")
	entries, err := fs.ReadDir(tree, cleanDir(path.Join(parts[:at]...)))
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if m := re.FindStringSubmatch(e.Name()); m != nil && e.IsDir() && !strings.Contains(m[1], "{") {
			full := strings.ReplaceAll(template, NamePlaceholder, m[1])
			if fi, err := fs.Stat(tree, cleanDir(full)); err == nil && fi.IsDir() {
				names = append(names, m[1])
			}
		}
	}
	return names
}

// hostOrThis is h, with this machine's hostname when it names none.
func hostOrThis(h Host) Host {
	if h.Name == "" {
		h.Name, _ = os.Hostname()
	}
	return h
}
