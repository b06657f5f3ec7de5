package main

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// flagName is a field's flag: the kebab case, singular for lists
// (allowedPaths ↔ --allowed-path).
func flagName(field string) string {
	var b strings.Builder
	for i, r := range field {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('-')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	name := b.String()
	switch name {
	case "allowed-paths":
		return "allowed-path"
	case "labels":
		return "label"
	case "health-checks":
		return "health-check"
	}
	return name
}

// applyConfig sets every flag the user did not give from the Agent file.
// Flags win; an unknown field is an error naming file and line. It
// returns the scalar fields meant for other commands, by flag name (the
// agent's token file, read by a sync that has no such flag).
func applyConfig(cmd *cobra.Command, file string) (map[string]string, error) {
	others := map[string]string{}
	err := applyConfigTo(cmd, file, others)
	return others, err
}

func applyConfigTo(cmd *cobra.Command, file string, others map[string]string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return fmt.Errorf("%s: %v", file, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return fmt.Errorf("%s: an Agent config is a mapping with apiVersion, kind and spec", file)
	}
	where := func(n *yaml.Node, field, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s: %s", file, n.Line, field, fmt.Sprintf(format, args...))
	}
	var spec *yaml.Node
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		switch k.Value {
		case "apiVersion":
			if v.Value != resource.APIVersion {
				return where(v, "apiVersion", "%q is not supported; use %q", v.Value, resource.APIVersion)
			}
		case "kind":
			if v.Value != "Agent" {
				return where(v, "kind", "%q: an agent config has kind Agent", v.Value)
			}
		case "metadata":
		case "spec":
			spec = v
		default:
			hint := resource.DidYouMean(k.Value, []string{"apiVersion", "kind", "metadata", "spec"})
			if hint == "" {
				hint = " (an Agent config has apiVersion, kind, metadata and spec)"
			}
			return where(k, k.Value, "unknown field%s", hint)
		}
	}
	if spec == nil || spec.Kind != yaml.MappingNode {
		return fmt.Errorf("%s: spec is required", file)
	}
	known := allFlags(cmd.Root())
	for i := 0; i+1 < len(spec.Content); i += 2 {
		k, v := spec.Content[i], spec.Content[i+1]
		field := "spec." + k.Value
		name := flagName(k.Value)
		f := cmd.Flag(name)
		switch {
		case f == nil && known[name]:
			switch {
			case v.Kind == yaml.ScalarNode:
				others[name] = v.Value
			case v.Kind == yaml.SequenceNode && structFields[k.Value]:
				// A list of entries (notify): as YAML, for the files it names.
				if b, err := yaml.Marshal(v); err == nil {
					others[name] = string(b)
				}
			}
			continue // meant for another command
		case f == nil || name == "config":
			return where(k, field, "unknown field%s", resource.DidYouMean(k.Value, configFields(known)))
		case f.Changed:
			continue // the flag wins
		}
		values := []*yaml.Node{v}
		switch {
		case v.Kind == yaml.SequenceNode:
			values = v.Content
		case v.Kind == yaml.MappingNode && mapFields[k.Value]:
			values = keyValues(v) // labels: {role: web} is --label role=web
		}
		for _, item := range values {
			if item.Kind == yaml.MappingNode && structFields[k.Value] {
				if err := checkKeys(item, field, f.Value, where); err != nil {
					return err
				}
				item = flowScalar(item) // a host check: its flag takes it as YAML
			}
			if item.Kind != yaml.ScalarNode {
				return where(item, field, "must be a value or a list of values")
			}
			if err := f.Value.Set(item.Value); err != nil {
				return where(item, field, "%v", err)
			}
		}
		f.Changed = true
	}
	return nil
}

// mapFields are the fields that may be a mapping of KEY: VALUE, each set
// as one KEY=VALUE of their flag.
var mapFields = map[string]bool{"labels": true}

// structFields are the fields whose values are mappings (a list of
// them): their flag takes each as YAML.
var structFields = map[string]bool{"healthChecks": true, "notify": true}

// checkKeys refuses, on its own line, a key of an entry that its flag
// does not know (a flag that lists its fields: notify), rather than at
// the entry's first line once flattened.
func checkKeys(m *yaml.Node, field string, v pflag.Value, where func(*yaml.Node, string, string, ...any) error) error {
	lister, ok := v.(interface{ Fields() []string })
	if !ok {
		return nil
	}
	known := lister.Fields()
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if !slices.Contains(known, k.Value) {
			return where(k, field+"."+k.Value, "unknown field%s (an entry has %s)", resource.DidYouMean(k.Value, known), strings.Join(known, ", "))
		}
	}
	return nil
}

// flowScalar writes a mapping as one line of YAML, keeping its line.
func flowScalar(m *yaml.Node) *yaml.Node {
	c := *m
	c.Style = yaml.FlowStyle
	b, err := yaml.Marshal(&c)
	if err != nil {
		return m // refused by the caller: not a value
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Value: strings.TrimSpace(string(b)), Line: m.Line}
}

// keyValues turns a mapping into KEY=VALUE scalars, keeping lines.
func keyValues(m *yaml.Node) []*yaml.Node {
	var out []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			out = append(out, v) // refused by the caller: not a value
			continue
		}
		out = append(out, &yaml.Node{Kind: yaml.ScalarNode, Value: k.Value + "=" + v.Value, Line: k.Line})
	}
	return out
}

// configFields names every field an Agent config may hold: the fields of
// every command's flags (the agent's among them), so one file serves all.
func configFields(flags map[string]bool) []string {
	var fields []string
	for f := range flags {
		if f != "config" && f != "help" {
			fields = append(fields, fieldName(f))
		}
	}
	return fields
}

// fieldName is a flag's field in the Agent config: flagName's inverse
// (--allowed-path ↔ allowedPaths, --fetch-timeout ↔ fetchTimeout).
func fieldName(flag string) string {
	switch flag {
	case "allowed-path":
		return "allowedPaths"
	case "label":
		return "labels"
	case "health-check":
		return "healthChecks"
	}
	words := strings.Split(flag, "-")
	for i, w := range words[1:] {
		if w != "" {
			words[i+1] = strings.ToUpper(w[:1]) + w[1:]
		}
	}
	return strings.Join(words, "")
}

// allFlags names every flag of every command.
func allFlags(root *cobra.Command) map[string]bool {
	out := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { out[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { out[f.Name] = true })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return out
}
