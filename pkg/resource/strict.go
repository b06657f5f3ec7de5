package resource

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/cortex-sync/cortex-sync/internal/suggest"
)

// strict checks a YAML node against the Go type it will decode into,
// reporting every unknown field and every value of the wrong shape with its
// field path and line, and recording each field's line. yaml.v3 alone stops
// at the first problem, knows no field paths, and accepts unknown fields.
type strict struct {
	lines  map[string]int
	report func(line int, field, msg string)
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func (s *strict) check(n *yaml.Node, t reflect.Type, field string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if field != "" {
		s.lines[field] = n.Line
	}
	if n.Tag == "!!null" {
		return
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			s.report(n.Line, field, yamlMessage(err))
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		s.check(n, t.Elem(), field)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			s.report(n.Line, field, "must be a mapping, not "+describe(n))
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			sub := join(field, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				s.report(k.Line, sub, unknownField(k.Value, fields))
				continue
			}
			s.check(v, ft, sub)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			s.report(n.Line, field, "must be a list, not "+describe(n))
			return
		}
		for i, e := range n.Content {
			s.check(e, t.Elem(), fmt.Sprintf("%s[%d]", field, i))
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			s.report(n.Line, field, "must be a mapping, not "+describe(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			s.check(n.Content[i+1], t.Elem(), join(field, n.Content[i].Value))
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			s.report(n.Line, field, "must be a string, not "+describe(n))
			return
		}
		if isPathField(field) {
			var v string // decoded, so that a !!binary value is seen as bytes
			if err := n.Decode(&v); err == nil {
				if msg := pathText(v); msg != "" {
					s.report(n.Line, field, msg)
				}
			}
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			s.report(n.Line, field, "must be true or false, not "+describe(n))
		}
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint32, reflect.Uint64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			s.report(n.Line, field, "must be a whole number, not "+describe(n))
		}
	}
}

// yamlFields maps the YAML names of a struct's fields to their types,
// flattening inline structs.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case tag == "-" || !f.IsExported():
		case strings.Contains(opts, "inline"):
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
		case name == "":
			out[strings.ToLower(f.Name)] = f.Type
		default:
			out[name] = f.Type
		}
	}
	return out
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!int", "!!float":
		return "the number " + n.Value
	case "!!bool":
		return "the boolean " + n.Value
	}
	return fmt.Sprintf("%q", n.Value)
}

// DidYouMean suggests the known name closest to a mistyped one, as
// ` (did you mean "branch"?)`, or returns "" when none is close. Case is
// ignored; ties go to the first in sorted order, so the hint is stable.
func DidYouMean(name string, known []string) string {
	best := suggest.Closest(name, known, true)
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// unknownField is the message for a key the type has no field for.
func unknownField(name string, fields map[string]reflect.Type) string {
	known := slices.Sorted(maps.Keys(fields))
	if hint := DidYouMean(name, known); hint != "" {
		return "unknown field" + hint
	}
	return "unknown field (known fields: " + strings.Join(known, ", ") + ")"
}

// yamlMessage strips yaml.v3's prefixes from an error, keeping its substance.
func yamlMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		err = errors.New(te.Errors[0])
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if i := strings.Index(msg, ": "); i > 0 && strings.HasPrefix(msg, "line ") {
		msg = msg[i+2:]
	}
	return msg
}
