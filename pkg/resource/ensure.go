package resource

// Ensure says whether a path resource should exist. The zero value is
// Present: a manifest that does not say wants it there.
type Ensure string

// The values of spec.ensure.
const (
	Present Ensure = "present"
	Absent  Ensure = "absent"
)

// Absent reports whether the resource is declared absent.
func (e Ensure) Absent() bool { return e == Absent }

// Validate checks the field's value.
func (e Ensure) Validate(v *Validation, field string) {
	if e != "" {
		v.OneOf(field, string(e), string(Present), string(Absent))
	}
}
