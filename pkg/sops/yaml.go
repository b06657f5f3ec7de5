package sops

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The YAML form, read and written as sops does: comments become entries
// of the tree (so they are encrypted and keep their place), mappings keep
// their order, the output is indented by four.

func loadYAML(in []byte) (*document, error) {
	var branches []branch
	d := yaml.NewDecoder(bytes.NewReader(in))
	for {
		var n yaml.Node
		err := d.Decode(&n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		c := yamlCheck{open: map[*yaml.Node]bool{}}
		if err := c.node(&n, false); err != nil {
			return nil, err
		}
		b, err := yamlMapping(&n, nil, false)
		if err != nil {
			return nil, err
		}
		branches = append(branches, b)
	}
	return withMetadata(branches)
}

// yamlCheck refuses what yaml.v3 refuses only when decoding into a map,
// in one walk linear in the document: a key twice in a mapping (yaml.v3
// compares every key with every other, quadratic), an alias of itself, and
// aliases that expand to far more than the document (its ratio).
type yamlCheck struct {
	nodes, aliased int
	open           map[*yaml.Node]bool // the anchors being expanded
}

func (c *yamlCheck) node(n *yaml.Node, inAlias bool) error {
	c.nodes++
	if inAlias {
		c.aliased++
	}
	if c.aliased > 100 && c.nodes > 1000 && float64(c.aliased)/float64(c.nodes) > aliasRatio(c.nodes) {
		return errors.New("the document contains excessive aliasing")
	}
	switch n.Kind {
	case yaml.AliasNode:
		if c.open[n.Alias] {
			return fmt.Errorf("line %d: anchor %q contains itself", n.Line, n.Value)
		}
		c.open[n.Alias] = true
		defer delete(c.open, n.Alias)
		return c.node(n.Alias, true)
	case yaml.MappingNode:
		type key struct {
			kind  yaml.Kind
			value string
		}
		seen := make(map[key]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if line, ok := seen[key{k.Kind, k.Value}]; ok {
				return fmt.Errorf("line %d: mapping key %q already defined at line %d", k.Line, k.Value, line)
			}
			seen[key{k.Kind, k.Value}] = k.Line
		}
	}
	for _, e := range n.Content {
		if err := c.node(e, inAlias); err != nil {
			return err
		}
	}
	return nil
}

// aliasRatio is yaml.v3's bound on the share of nodes that come from
// aliases: 99% of a small document, down to 10% of one of 4M nodes.
func aliasRatio(nodes int) float64 {
	const low, high = 400_000, 4_000_000
	switch {
	case nodes <= low:
		return 0.99
	case nodes >= high:
		return 0.10
	}
	return 0.99 - 0.89*float64(nodes-low)/float64(high-low)
}

// withMetadata takes the "sops" entry out of every document; the first
// document's is the metadata.
func withMetadata(branches []branch) (*document, error) {
	var meta branch
	found := false
	for bi, b := range branches {
		out := b[:0]
		for _, it := range b {
			if k, ok := it.key.(string); ok && k == "sops" {
				if bi == 0 {
					if found {
						return nil, errors.New("two sops entries")
					}
					found = true
					m, ok := it.value.(branch)
					if !ok {
						return nil, errors.New("the sops entry is not a mapping")
					}
					meta = m
				}
				continue
			}
			out = append(out, it)
		}
		branches[bi] = out
	}
	if !found {
		return nil, errors.New("no sops metadata (is the file encrypted?)")
	}
	md, err := parseMetadata(plain(meta).(map[string]any))
	if err != nil {
		return nil, err
	}
	return &document{branches: branches, meta: md}, nil
}

// plain turns a tree into Go maps and slices, comments left out.
func plain(v any) any {
	switch v := v.(type) {
	case branch:
		m := make(map[string]any, len(v))
		for _, it := range v {
			if k, ok := it.key.(string); ok {
				m[k] = plain(it.value)
			}
		}
		return m
	case []any:
		l := make([]any, 0, len(v))
		for _, e := range v {
			if _, ok := e.(comment); !ok {
				l = append(l, plain(e))
			}
		}
		return l
	}
	return v
}

func commentLines(c string, inline bool, add func(comment)) {
	if c == "" {
		return
	}
	for _, l := range strings.Split(c, "\n") {
		if l != "" {
			add(comment{text: l[1:], inline: inline})
		}
	}
}

func yamlValue(n *yaml.Node, handled bool) (any, error) {
	switch n.Kind {
	case yaml.SequenceNode:
		var l []any
		add := func(c comment) { l = append(l, c) }
		if !handled {
			commentLines(n.HeadComment, false, add)
			commentLines(n.LineComment, false, add)
		}
		for _, e := range n.Content {
			commentLines(e.HeadComment, false, add)
			commentLines(e.LineComment, true, add)
			v, err := yamlValue(e, true)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
			commentLines(e.FootComment, false, add)
		}
		if !handled {
			commentLines(n.FootComment, false, add)
		}
		return l, nil
	case yaml.MappingNode:
		return yamlMapping(n, branch{}, handled)
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, err
		}
		return v, nil
	case yaml.AliasNode:
		return yamlValue(n.Alias, false)
	}
	return nil, nil
}

func yamlMapping(n *yaml.Node, b branch, handled bool) (branch, error) {
	if b == nil {
		b = branch{}
	}
	add := func(c comment) { b = append(b, item{key: c}) }
	if !handled {
		commentLines(n.HeadComment, false, add)
		commentLines(n.LineComment, false, add)
	}
	var err error
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if b, err = yamlMapping(c, b, false); err != nil {
				return nil, err
			}
		}
	case yaml.SequenceNode:
		return nil, errors.New("a YAML document that is a sequence (sops files are mappings)")
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			commentLines(k.HeadComment, false, add)
			commentLines(k.LineComment, false, add)
			scalar := v.Kind == yaml.ScalarNode || v.Kind == yaml.AliasNode
			if scalar {
				commentLines(v.HeadComment, false, add)
				commentLines(v.LineComment, true, add)
			}
			var key any
			if err := k.Decode(&key); err != nil {
				return nil, err
			}
			val, err := yamlValue(v, scalar)
			if err != nil {
				return nil, err
			}
			b = append(b, item{key: key, value: val})
			if scalar {
				commentLines(v.FootComment, false, add)
			}
			commentLines(k.FootComment, false, add)
		}
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return b, nil
		}
		return nil, errors.New("a YAML document that is a single value (sops files are mappings)")
	case yaml.AliasNode:
		if b, err = yamlMapping(n.Alias, b, false); err != nil {
			return nil, err
		}
	}
	if !handled {
		commentLines(n.FootComment, false, add)
	}
	return b, nil
}

func emitYAML(branches []branch) ([]byte, error) {
	var buf bytes.Buffer
	e := yaml.NewEncoder(&buf)
	e.SetIndent(4)
	for _, b := range branches {
		m := &yaml.Node{Kind: yaml.MappingNode}
		if err := yamlFill(b, m); err != nil {
			return nil, err
		}
		if err := e.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{m}}); err != nil {
			return nil, fmt.Errorf("writing YAML: %w", err)
		}
	}
	e.Close()
	return buf.Bytes(), nil
}

func joinComments(cs []string) string { return "#" + strings.Join(cs, "\n#") }

func addHead(n *yaml.Node, cs []string) { addComment(&n.HeadComment, cs, true) }
func addFoot(n *yaml.Node, cs []string) { addComment(&n.FootComment, cs, false) }
func addLine(n *yaml.Node, cs []string) { addComment(&n.LineComment, cs, false) }

// addComment puts the comments cs before (or after) what a node's comment
// field holds.
func addComment(field *string, cs []string, before bool) {
	switch {
	case len(cs) == 0:
	case *field == "":
		*field = joinComments(cs)
	case before:
		*field = joinComments(cs) + "\n" + *field
	default:
		*field += "\n" + joinComments(cs)
	}
}

func yamlNode(v any) (*yaml.Node, error) {
	switch v := v.(type) {
	case branch:
		m := &yaml.Node{Kind: yaml.MappingNode}
		return m, yamlFill(v, m)
	case []any:
		s := &yaml.Node{Kind: yaml.SequenceNode}
		return s, yamlSeq(v, s)
	}
	n := &yaml.Node{}
	if err := n.Encode(v); err != nil {
		return nil, err
	}
	return n, nil
}

func yamlSeq(l []any, s *yaml.Node) error {
	var head, inline []string
	first := true
	for _, e := range l {
		if c, ok := e.(comment); ok {
			if c.inline {
				inline = append(inline, c.text)
			} else {
				head = append(head, c.text)
			}
			continue
		}
		if first {
			addHead(s, head)
			head, first = nil, false
		}
		n, err := yamlNode(e)
		if err != nil {
			return err
		}
		addHead(n, head)
		addLine(n, inline)
		head, inline = nil, nil
		s.Content = append(s.Content, n)
	}
	head = append(head, inline...)
	if len(head) > 0 {
		if first {
			addHead(s, head)
		} else {
			addFoot(s.Content[len(s.Content)-1], head)
		}
	}
	return nil
}

func yamlFill(b branch, m *yaml.Node) error {
	var head, inline []string
	first := true
	for _, it := range b {
		if c, ok := it.key.(comment); ok {
			if c.inline {
				inline = append(inline, c.text)
			} else {
				head = append(head, c.text)
			}
			continue
		}
		if first {
			addHead(m, head)
			head, first = nil, false
		}
		k := &yaml.Node{}
		if err := k.Encode(it.key); err != nil {
			return err
		}
		addHead(k, head)
		head = nil
		v, err := yamlNode(it.value)
		if err != nil {
			return err
		}
		addLine(v, inline)
		inline = nil
		m.Content = append(m.Content, k, v)
	}
	head = append(head, inline...)
	if len(head) > 0 {
		if first {
			addHead(m, head)
		} else {
			addFoot(m.Content[len(m.Content)-2], head)
		}
	}
	return nil
}
