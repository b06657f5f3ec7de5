// Package resource is the manifest model: strict decoding of Kubernetes-style
// YAML into resources, validation with errors that say where, and the
// dependency graph. What each kind means on the host lives in pkg/driver.
package resource

import (
	"fmt"
	"strings"
)

// APIVersion is the only manifest apiVersion this build understands.
const APIVersion = "cortex-sync/v1alpha1"

// Annotations with meaning to cortex-sync.
const (
	AnnotationPrune     = "cortex-sync/prune"     // "disabled": keep on the host when removed from Git
	AnnotationReconcile = "cortex-sync/reconcile" // "disabled": observe and report Suspended, never change
)

// ID names a resource uniquely: "Kind/name".
type ID string

// NewID joins kind and name.
func NewID(kind, name string) ID { return ID(kind + "/" + name) }

// Kind is the part before the slash.
func (id ID) Kind() string { k, _, _ := strings.Cut(string(id), "/"); return k }

// Name is the part after the slash.
func (id ID) Name() string { _, n, _ := strings.Cut(string(id), "/"); return n }

// Metadata is what every manifest carries besides its spec.
type Metadata struct {
	Name        string            `yaml:"name"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// Origin says where a resource was declared.
type Origin struct {
	File string // slash path relative to the source root
	Doc  int    // 1-based document index in File
	Line int    // line of the document's first key
}

// Resource is one decoded, validated manifest document.
type Resource struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Metadata   Metadata `yaml:"metadata"`
	Spec       Spec     `yaml:"-"`
	Origin     Origin   `yaml:"-"`

	lines  map[string]int // field path → line, for errors found after decoding
	subst  *Substitution  // what rendering it for this host used; nil without substitute: true
	parent ID             // the resource that declared it (Generator); "" for a manifest's
}

// ID is "Kind/name".
func (r *Resource) ID() ID { return NewID(r.Kind, r.Metadata.Name) }

// PruneDisabled reports whether the resource stays on the host when it leaves Git.
func (r *Resource) PruneDisabled() bool {
	return r.Metadata.Annotations[AnnotationPrune] == "disabled"
}

// Suspended reports whether the resource is only observed, never changed.
func (r *Resource) Suspended() bool {
	return r.Metadata.Annotations[AnnotationReconcile] == "disabled"
}

// Line is the line of a field ("spec.mode"), or of its nearest parent.
func (r *Resource) Line(field string) int {
	for f := field; f != ""; {
		if l, ok := r.lines[f]; ok {
			return l
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return r.Origin.Line
}

// Spec is a kind's desired state. Implementations live with their drivers and
// embed Base inline.
type Spec interface {
	Common() *Base
	// Validate checks the spec's own fields.
	Validate(v *Validation)
	// Claims lists the host paths the resource manages.
	Claims() []Claim
}

// Base holds the spec fields every kind shares.
type Base struct {
	DependsOn []ID `yaml:"dependsOn"`
	// Substitute renders ${NAME} references in what the resource holds
	// with the host's variables (see docs/manifests.md, Substitution).
	Substitute bool `yaml:"substitute" json:"substitute,omitempty"`
}

// Common returns the shared fields; embedding Base gives every Spec this method.
func (b *Base) Common() *Base { return b }

// Singular is a Spec that may run on one host of a fleet at a time (a
// Process with singleton: true): an agent in a fleet campaigns for it in
// etcd under the resource's name, and its supervisor fences it.
type Singular interface {
	IsSingleton() bool
}

// Requirer is a Spec that implies dependencies of its own (restartOn, refreshOn).
type Requirer interface {
	Requires() []ID
}

// Claim is a host path a resource manages. A Tree claim manages everything
// below the path too (a mirrored directory).
type Claim struct {
	Field string // spec field that names it, for errors
	Path  string
	Tree  bool
	// Keeps: the resource is a directory that leaves what lies below it
	// alone (no mirror, no purge, never replaced by another type), so it
	// may hold a path cortex-sync reserves for itself. Any other claim
	// above a reserved path is refused.
	Keeps bool
}

// Reserved is a path cortex-sync owns on the host it manages: its state dir
// (snapshot, caches, backups, fences), its config, token and key files. No
// resource may claim it or a path below it, and no claim above it may
// replace or purge what it holds.
type Reserved struct {
	Path string // in-root, clean and absolute
	What string // what it is, for errors: "the state dir (--state-dir)"
}

// Kinds maps a kind name to a constructor of its empty Spec.
type Kinds map[string]func() Spec

// FieldError is a problem with one field of one manifest document.
type FieldError struct {
	Origin Origin
	Line   int
	ID     ID // empty when the document has no usable kind or name
	Field  string
	Msg    string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.Origin.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	fmt.Fprintf(&b, ": document %d", e.Origin.Doc)
	if e.ID != "" {
		fmt.Fprintf(&b, " (%s)", e.ID)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Watched is a spec with host paths beyond its claims whose change
// concerns it: a command's creates, whose removal runs it again.
type Watched interface {
	Watched() []string
}
