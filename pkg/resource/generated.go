package resource

// Generator is a Spec that declares resources of its own once it is
// validated: a Directory with decrypt: sops declares a File for each
// encrypted entry of its source. The generated resources are named below
// it ("File/<its name>/<name>", a name no manifest can take), carry its
// origin, labels and annotations, and may claim paths inside the tree it
// mirrors; it is the one a user edits.
type Generator interface {
	Generated() []Generated
}

// Generated is one resource a Generator declares.
type Generated struct {
	Kind string
	Name string // below the generator's name
	Spec Spec
}

// GeneratedBy names the resource that declared r (a Directory for the
// File of one of its encrypted entries); "" for a resource of a manifest.
func (r *Resource) GeneratedBy() ID { return r.parent }

// SetGeneratedBy marks a resource rebuilt from a record as declared by
// parent.
func (r *Resource) SetGeneratedBy(parent ID) { r.parent = parent }

// generated are the resources r declares, when its spec is a Generator.
func generated(r *Resource) []*Resource {
	g, ok := r.Spec.(Generator)
	if !ok {
		return nil
	}
	var out []*Resource
	for _, c := range g.Generated() {
		out = append(out, &Resource{
			APIVersion: r.APIVersion,
			Kind:       c.Kind,
			Metadata:   Metadata{Name: r.Metadata.Name + "/" + c.Name, Labels: r.Metadata.Labels, Annotations: r.Metadata.Annotations},
			Spec:       c.Spec,
			Origin:     r.Origin,
			lines:      r.lines,
			parent:     r.ID(),
		})
	}
	return out
}
