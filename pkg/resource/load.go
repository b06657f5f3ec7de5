package resource

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/hashicorp/go-multierror"
	"go.yaml.in/yaml/v3"

	"github.com/cortex-sync/cortex-sync/pkg/vars"
)

// IgnoreFile holds gitignore patterns that leave paths out of manifest discovery.
const IgnoreFile = ".cortexignore"

// Discover lists the manifest files (*.yaml, *.yml) below dir in tree, in
// lexical order, honouring .cortexignore files and skipping .git.
func Discover(tree fs.FS, dir string) ([]string, error) {
	dir = cleanDir(dir)
	base := components(dir)
	var files []string
	var patterns []gitignore.Pattern
	var walk func(d string) error
	walk = func(d string) error {
		entries, err := fs.ReadDir(tree, d)
		if err != nil {
			return err
		}
		saved := len(patterns) // this directory's patterns apply below it only
		defer func() { patterns = patterns[:saved] }()
		if data, err := readLimited(tree, path.Join(d, IgnoreFile), DefaultLimits.FileBytes); err == nil {
			domain := components(d)[len(base):]
			for _, line := range strings.Split(string(data), "\n") {
				line = strings.TrimRight(line, "\r")
				if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
					continue
				}
				patterns = append(patterns, gitignore.ParsePattern(line, domain))
			}
		}
		matcher := gitignore.NewMatcher(patterns)
		for _, e := range entries {
			name := e.Name()
			p := path.Join(d, name)
			rel := append(components(d)[len(base):], name)
			if e.IsDir() {
				if name == ".git" || matcher.Match(rel, true) {
					continue
				}
				if err := walk(p); err != nil {
					return err
				}
				continue
			}
			if (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) && !matcher.Match(rel, false) {
				files = append(files, p)
			}
		}
		return nil
	}
	if err := walk(dir); err != nil {
		return nil, fmt.Errorf("read manifests in %s: %w", dir, err)
	}
	sort.Strings(files)
	return files, nil
}

func cleanDir(dir string) string {
	dir = path.Clean(strings.TrimPrefix(dir, "/"))
	if dir == "" {
		return "."
	}
	return dir
}

func components(p string) []string {
	if p == "." || p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// Load reads, decodes and validates every manifest below dir in tree (the
// repository's tree, so that `source` paths can reach all of it). Every
// problem found is returned together, each naming file, line, document,
// resource and field.
func Load(tree fs.FS, dir string, kinds Kinds) (*Set, error) {
	return Options{}.Load(tree, dir, kinds)
}

// Options are what the host allows, checked while loading so that a desired
// state the host would refuse is refused before anything is applied.
type Options struct {
	// AllowedPaths confines every path a resource claims to lie at or below
	// one of these absolute in-root paths (--allowed-path); empty allows all.
	AllowedPaths []string
	// Reserved are the paths cortex-sync itself owns under the root: a
	// resource that would write there is refused, like one outside the
	// allowed paths.
	Reserved []Reserved
	// Limits bound what loading reads and allocates; zero fields take
	// DefaultLimits.
	Limits Limits
	// Host picks this host's paths from the Fleet manifest when the load
	// is of the repository's top and it has one (an empty name: this
	// machine's hostname).
	Host Host
	// Decrypt decrypts a SOPS-encrypted vars file a Fleet rule names; nil
	// makes such a file an error once substitution needs it.
	Decrypt vars.Decrypt
	// Vars, when set, are the variables substitute: true renders with,
	// instead of the host's facts and what the Fleet manifest gives it.
	Vars *vars.Set

	fleet *Fleet // the Fleet manifest Load found, for the host's variables
}

// Limits bound the manifests a load accepts, so that a huge or hostile
// repository is refused fast, in bounded memory, instead of exhausting the
// host. Large data belongs in files that a File's or Directory's `source`
// names: those are streamed and not limited here.
type Limits struct {
	FileBytes  int64 // one manifest file (checked before it is read)
	TotalBytes int64 // every manifest file together
	Documents  int   // YAML documents in every manifest file together
	Depth      int   // nesting of mappings and sequences in one document
}

// DefaultLimits are far above any hand-written desired state (the 2,000
// File manifests of the crash suite take 0.7 MB), and keep the memory a load
// can take to about 8 times TotalBytes.
var DefaultLimits = Limits{FileBytes: 8 << 20, TotalBytes: 64 << 20, Documents: 20000, Depth: 64}

func (l Limits) orDefault() Limits {
	d := DefaultLimits
	if l.FileBytes > 0 {
		d.FileBytes = l.FileBytes
	}
	if l.TotalBytes > 0 {
		d.TotalBytes = l.TotalBytes
	}
	if l.Documents > 0 {
		d.Documents = l.Documents
	}
	if l.Depth > 0 {
		d.Depth = l.Depth
	}
	return d
}

// ErrLimit is wrapped by every LimitError.
var ErrLimit = errors.New("manifest limit exceeded")

// LimitError reports manifests beyond one of the Limits.
type LimitError struct {
	File  string
	Line  int    // 0 when the whole file is meant
	Limit string // the Limits field
	Max   int64
	Msg   string // what was found
}

func (e *LimitError) Error() string {
	where := e.File
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	hint := "move large content into a file named by spec.source, or split the manifests"
	switch e.Limit {
	case "TotalBytes":
		hint = "move large content into files named by spec.source"
	case "Documents":
		hint = "manage many files with one Directory that mirrors a source tree instead of one File each"
	case "Depth":
		hint = "no cortex-sync spec nests this deep; check the YAML"
	}
	return fmt.Sprintf("%s: %s, more than the %s (limit %s: --%s raises it, or %s in the Agent config); %s", where, e.Msg, limitAmount(e.Limit, e.Max), e.Limit, limitFlag(e.Limit), limitField(e.Limit), hint)
}

func (e *LimitError) Unwrap() error { return ErrLimit }

// limitFlag is the flag that sets a Limits field: FileBytes ↔
// --limit-file-bytes.
func limitFlag(limit string) string {
	var b strings.Builder
	b.WriteString("limit")
	for _, r := range limit {
		if unicode.IsUpper(r) {
			b.WriteByte('-')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// limitField is the Agent config's field for a Limits field: FileBytes ↔
// limitFileBytes.
func limitField(limit string) string { return "limit" + limit }

func limitAmount(limit string, n int64) string {
	switch limit {
	case "FileBytes":
		return byteSize(n) + " a manifest file may hold"
	case "TotalBytes":
		return byteSize(n) + " all manifest files together may hold"
	case "Documents":
		return fmt.Sprintf("%d documents all manifest files together may hold", n)
	}
	return fmt.Sprintf("%d levels a document may nest", n)
}

func byteSize(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// sizeOf is a file's size without reading it, when the tree can say.
func sizeOf(tree fs.FS, name string) (int64, bool) {
	if l, ok := tree.(interface {
		Lstat(string) (fs.FileInfo, error)
	}); ok {
		if fi, err := l.Lstat(name); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			return fi.Size(), true
		}
	}
	if st, ok := tree.(fs.StatFS); ok {
		if fi, err := st.Stat(name); err == nil && fi.Size() > 0 {
			return fi.Size(), true
		}
	}
	return 0, false
}

// readLimited reads a manifest file, refusing one over max bytes: by its
// size before reading when the tree knows it, else after reading max+1.
func readLimited(tree fs.FS, name string, max int64) ([]byte, error) {
	tooBig := func(n int64) error {
		return &LimitError{File: name, Limit: "FileBytes", Max: max, Msg: fmt.Sprintf("it holds %d bytes", n)}
	}
	if n, ok := sizeOf(tree, name); ok && n > max {
		return nil, tooBig(n)
	}
	f, err := tree.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		return nil, tooBig(fi.Size())
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, &LimitError{File: name, Limit: "FileBytes", Max: max, Msg: "it holds more bytes"}
	}
	return data, nil
}

// budget is what is left of the limits while loading.
type budget struct {
	Limits
	bytes int64
	docs  int
	vars  *hostVars
}

// Load is the package's Load, checking the desired state against o too.
// A load of the repository's top (dir ".") where fleet.yaml holds the
// Fleet manifest loads the paths the Fleet gives o.Host instead.
func (o Options) Load(tree fs.FS, dir string, kinds Kinds) (*Set, error) {
	if cleanDir(dir) == "." {
		f, err := ReadFleet(tree)
		if err != nil {
			return nil, err
		}
		if f != nil {
			t, err := f.Resolve(tree, hostOrThis(o.Host))
			if err != nil {
				return nil, err
			}
			o.fleet = f
			return o.LoadPaths(tree, t.Paths, kinds)
		}
	}
	return o.LoadPaths(tree, []string{dir}, kinds)
}

// LoadPaths reads, decodes and validates the manifests below every one of
// dirs as one desired set: a resource declared below two of them is an
// error naming both files, as one declared twice below one is. A file
// below two of the dirs (one inside the other) is read once.
func (o Options) LoadPaths(tree fs.FS, dirs []string, kinds Kinds) (*Set, error) {
	allowed := make([]string, 0, len(o.AllowedPaths))
	for _, a := range o.AllowedPaths {
		if !path.IsAbs(a) {
			return nil, fmt.Errorf("allowed path %q must be absolute", a)
		}
		allowed = append(allowed, path.Clean(a))
	}
	var files []string
	for _, dir := range dirs {
		found, err := Discover(tree, dir)
		if err != nil {
			return nil, err
		}
		files = append(files, found...)
	}
	slices.Sort(files)
	files = slices.Compact(files)
	var errs *multierror.Error
	var list []*Resource
	b := &budget{Limits: o.Limits.orDefault(), vars: &hostVars{o: o, tree: tree}}
	// Sizes first, where the tree knows them: too much in all is refused
	// before a byte is read.
	var known int64
	for _, f := range files {
		if n, ok := sizeOf(tree, f); ok && n <= b.FileBytes {
			if known += n; known > b.TotalBytes {
				return nil, Problems{&LimitError{File: f, Limit: "TotalBytes", Max: b.TotalBytes, Msg: fmt.Sprintf("the manifests up to this file hold %d bytes", known)}}
			}
		}
	}
	for _, f := range files {
		data, err := readLimited(tree, f, b.FileBytes)
		var le *LimitError
		if errors.As(err, &le) {
			errs = multierror.Append(errs, err)
			continue
		}
		if err != nil {
			errs = multierror.Append(errs, fmt.Errorf("%s: %w", f, err))
			continue
		}
		if b.bytes += int64(len(data)); b.bytes > b.TotalBytes {
			// Stop reading: the rest could only add to the memory taken.
			errs = multierror.Append(errs, &LimitError{File: f, Limit: "TotalBytes", Max: b.TotalBytes, Msg: fmt.Sprintf("the manifests up to this file hold %d bytes", b.bytes)})
			return nil, Problems(errs.Errors)
		}
		rs, err := decodeFile(f, data, kinds, tree, b)
		list = append(list, rs...)
		errs = appendProblems(errs, err)
		if errors.As(err, &le) && le.Limit == "Documents" {
			return nil, Problems(errs.Errors)
		}
	}
	if b.vars.err != nil {
		errs = appendProblems(errs, b.vars.err) // once, not once a resource
	}
	// Cross-document checks run on what decoded, so every problem shows at once.
	set, err := newSet(list, allowed, o.Reserved)
	errs = appendProblems(errs, err)
	if errs.ErrorOrNil() != nil {
		return nil, Problems(errs.Errors)
	}
	return set, nil
}

// appendProblems adds err to errs, one entry per problem.
func appendProblems(errs *multierror.Error, err error) *multierror.Error {
	var p Problems
	if errors.As(err, &p) {
		return multierror.Append(errs, p...)
	}
	return multierror.Append(errs, err)
}

// Problems is every error found in the manifests, printed one per line.
type Problems []error

func (p Problems) Error() string {
	lines := make([]string, len(p))
	for i, e := range p {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find a FieldError among the problems.
func (p Problems) Unwrap() []error { return p }

var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decodeFile decodes every document of one manifest file.
func decodeFile(file string, data []byte, kinds Kinds, tree fs.FS, b *budget) ([]*Resource, error) {
	if err := checkUTF8(file, data); err != nil {
		return nil, err
	}
	var errs *multierror.Error
	var list []*Resource
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for doc := 1; ; doc++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		origin := Origin{File: file, Doc: doc}
		if b.docs++; b.docs > b.Documents {
			errs = multierror.Append(errs, &LimitError{File: file, Line: n.Line, Limit: "Documents", Max: int64(b.Documents), Msg: fmt.Sprintf("document %d brings the manifests to %d documents", doc, b.docs)})
			break
		}
		if err == nil {
			if line, ok := tooDeep(&n, b.Depth); !ok {
				errs = multierror.Append(errs, &LimitError{File: file, Line: line, Limit: "Depth", Max: int64(b.Depth), Msg: fmt.Sprintf("document %d nests deeper", doc)})
				continue
			}
		}
		if err != nil {
			fe := &FieldError{Origin: origin, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
			if m := syntaxLine.FindStringSubmatch(err.Error()); m != nil {
				fe.Line, _ = strconv.Atoi(m[1])
				fe.Msg = m[2]
			}
			errs = multierror.Append(errs, fe)
			break // the decoder cannot resynchronise after a syntax error
		}
		if len(n.Content) == 0 || n.Content[0].Tag == "!!null" {
			continue // an empty document, e.g. a trailing "---"
		}
		if isSOPS(n.Content[0]) {
			continue // a SOPS-encrypted data file (decrypt: sops), not a manifest
		}
		r, err := decodeDoc(n.Content[0], origin, kinds, tree, b.vars)
		if r != nil {
			list = append(list, r)
			list = append(list, generated(r)...)
		}
		errs = appendProblems(errs, err)
	}
	return list, errs.ErrorOrNil()
}

// checkUTF8 refuses a manifest file that is not UTF-8 text, at the line
// of the first byte that is not: YAML is UTF-8 here, so no path, content
// or name in it can hold other bytes.
func checkUTF8(file string, data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	off := 0
	for off < len(data) {
		r, n := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		off += n
	}
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	doc := 1 + bytes.Count(before, []byte("\n---")) // a leading "---" opens document 1
	col := off - bytes.LastIndexByte(before, '\n')
	return &FieldError{Origin: Origin{File: file, Doc: doc}, Line: line,
		Msg: fmt.Sprintf("byte 0x%02x (column %d) is not UTF-8; manifests are UTF-8 text", data[off], col)}
}

// tooDeep walks a document (aliases are not followed: they point back up)
// and reports the line where it nests past max levels.
func tooDeep(n *yaml.Node, max int) (int, bool) {
	type item struct {
		n     *yaml.Node
		depth int
	}
	stack := []item{{n, 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if it.depth > max {
			return it.n.Line, false
		}
		next := it.depth
		if it.n.Kind == yaml.MappingNode || it.n.Kind == yaml.SequenceNode {
			next++
		}
		for _, c := range it.n.Content {
			stack = append(stack, item{c, next})
		}
	}
	return 0, true
}

// decodeDoc decodes and validates one document.
func decodeDoc(root *yaml.Node, origin Origin, kinds Kinds, tree fs.FS, hv *hostVars) (*Resource, error) {
	origin.Line = root.Line
	r := &Resource{Origin: origin, lines: map[string]int{}}
	var errs []error
	report := func(line int, field, msg string) {
		errs = append(errs, &FieldError{Origin: origin, Line: line, ID: r.idIfNamed(), Field: field, Msg: msg})
	}
	if root.Kind != yaml.MappingNode {
		report(root.Line, "", "a manifest must be a mapping with apiVersion, kind, metadata and spec, not "+describe(root))
		return nil, Problems(errs)
	}
	if !hasKey(root, "apiVersion") && !hasKey(root, "kind") {
		report(root.Line, "", "not a cortex-sync manifest (no apiVersion or kind); if this YAML is data, list it in "+IgnoreFile)
		return nil, Problems(errs)
	}
	top := map[string]*yaml.Node{}
	var unknown []*yaml.Node // reported once the resource's ID is known
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "apiVersion", "kind", "metadata", "spec":
			top[k.Value] = v
			r.lines[k.Value] = k.Line
		default:
			unknown = append(unknown, k)
		}
	}
	s := &strict{lines: r.lines, report: report}
	scalar := func(field string) string {
		n := top[field]
		if n == nil || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
			report(root.Line, field, "is required")
			return ""
		}
		return n.Value
	}
	r.APIVersion = scalar("apiVersion")
	r.Kind = scalar("kind")
	if md := top["metadata"]; md != nil {
		before := len(errs)
		s.check(md, reflect.TypeFor[Metadata](), "metadata")
		if len(errs) == before {
			if err := md.Decode(&r.Metadata); err != nil {
				report(md.Line, "metadata", yamlMessage(err))
			}
		}
	}
	validateName(r, report)
	for _, k := range unknown {
		hint := DidYouMean(k.Value, []string{"apiVersion", "kind", "metadata", "spec"})
		report(k.Line, k.Value, "unknown field"+cmpOr(hint, " (a manifest has apiVersion, kind, metadata and spec)"))
	}
	if r.APIVersion != "" && r.APIVersion != APIVersion {
		report(r.lines["apiVersion"], "apiVersion", fmt.Sprintf("%q is not supported; use %q", r.APIVersion, APIVersion))
	}
	if r.Kind == FleetKind {
		if origin.File == FleetFile && len(errs) == 0 {
			return nil, nil // the Fleet manifest: read by ReadFleet, not a resource
		}
		report(r.lines["kind"], "kind", "a Fleet manifest is read only from "+FleetFile+" at the repository's top; move it there")
		return nil, Problems(errs)
	}
	newSpec, known := kinds[r.Kind]
	if r.Kind != "" && !known {
		report(r.lines["kind"], "kind", fmt.Sprintf("unknown kind %q%s; known kinds: %s", r.Kind, DidYouMean(r.Kind, kindNames(kinds)), strings.Join(kindNames(kinds), ", ")))
	}
	if !known {
		return nil, Problems(errs)
	}
	r.Spec = newSpec()
	specNode := top["spec"]
	if specNode == nil {
		report(root.Line, "spec", "is required")
		return nil, Problems(errs)
	}
	before := len(errs)
	s.check(specNode, reflect.TypeOf(r.Spec).Elem(), "spec")
	if len(errs) == before {
		if err := specNode.Decode(r.Spec); err != nil {
			report(specNode.Line, "spec", yamlMessage(err))
		}
	}
	if len(errs) > 0 {
		return nil, Problems(errs)
	}
	v := &Validation{Resource: r, Source: tree, Dir: path.Dir(origin.File), report: report, node: specNode}
	if r.Spec.Common().Substitute {
		if v.vars = hv.get(); v.vars == nil {
			return nil, Problems(errs) // the host's variables are wrong: said once, by LoadPaths
		}
	}
	r.Spec.Validate(v)
	v.finishSubstitution(specNode)
	if len(errs) > 0 {
		return nil, Problems(errs)
	}
	return r, nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

func validateName(r *Resource, report func(int, string, string)) {
	name := r.Metadata.Name
	switch {
	case name == "":
		report(r.Line("metadata"), "metadata.name", "is required")
	case len(name) > 253 || !nameRE.MatchString(name):
		report(r.Line("metadata.name"), "metadata.name", fmt.Sprintf("%q must be a lowercase RFC 1123 name: a-z, 0-9, '-' and '.', starting and ending alphanumeric", name))
	}
}

// idIfNamed is the ID once kind and name are known.
func (r *Resource) idIfNamed() ID {
	if r.Kind == "" || r.Metadata.Name == "" {
		return ""
	}
	return r.ID()
}

func kindNames(kinds Kinds) []string {
	return slices.Sorted(maps.Keys(kinds))
}

// isSOPS reports whether a document is a SOPS-encrypted YAML file: no
// apiVersion or kind, and a top-level sops mapping with a MAC.
func isSOPS(m *yaml.Node) bool {
	if m.Kind != yaml.MappingNode || hasKey(m, "apiVersion") || hasKey(m, "kind") {
		return false
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if v := m.Content[i+1]; m.Content[i].Value == "sops" && v.Kind == yaml.MappingNode {
			return hasKey(v, "mac")
		}
	}
	return false
}

func hasKey(m *yaml.Node, key string) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return true
		}
	}
	return false
}
