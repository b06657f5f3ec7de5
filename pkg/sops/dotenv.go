package sops

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The dotenv form: KEY=value lines (a "\n" in a value is a newline), #
// comments, the metadata flattened into sops_* keys.

func loadDotenv(in []byte) (*document, error) {
	var b, meta branch
	for n, line := range bytes.Split(in, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if line[0] == '#' {
			b = append(b, item{key: comment{text: string(line[1:])}})
			continue
		}
		k, v, ok := bytes.Cut(line, []byte("="))
		if !ok {
			return nil, fmt.Errorf("line %d is not KEY=value", n+1)
		}
		it := item{key: string(k), value: strings.ReplaceAll(string(v), `\n`, "\n")}
		if strings.HasPrefix(it.key.(string), "sops_") {
			it.key = strings.TrimPrefix(it.key.(string), "sops_")
			meta = append(meta, it)
			continue
		}
		b = append(b, it)
	}
	if meta == nil {
		return nil, errors.New("no sops_ metadata (is the file encrypted?)")
	}
	m, err := unflatten(meta)
	if err != nil {
		return nil, err
	}
	md, err := parseMetadata(m)
	if err != nil {
		return nil, err
	}
	return &document{branches: []branch{b}, meta: md}, nil
}

// unflatten rebuilds nested metadata from keys like age__list_0__map_enc.
func unflatten(b branch) (map[string]any, error) {
	type node struct {
		value   any
		set     bool
		keys    map[string]*node
		indices map[int]*node
	}
	root := &node{}
	for _, it := range b {
		k := it.key.(string)
		n := root
		for _, tok := range flatTokens(k) {
			var next *node
			if i, isList := tok.(int); isList {
				if n.indices == nil {
					n.indices = map[int]*node{}
				}
				if next = n.indices[i]; next == nil {
					next = &node{}
					n.indices[i] = next
				}
			} else {
				s := tok.(string)
				if n.keys == nil {
					n.keys = map[string]*node{}
				}
				if next = n.keys[s]; next == nil {
					next = &node{}
					n.keys[s] = next
				}
			}
			n = next
		}
		if n.set {
			return nil, fmt.Errorf("sops_%s appears twice", k)
		}
		n.value, n.set = it.value, true
	}
	var conv func(n *node) (any, error)
	conv = func(n *node) (any, error) {
		kinds := 0
		for _, b := range []bool{n.set, len(n.keys) > 0, len(n.indices) > 0} {
			if b {
				kinds++
			}
		}
		switch {
		case kinds > 1:
			return nil, errors.New("sops_ keys of mixed shapes")
		case n.set:
			return n.value, nil
		case len(n.indices) > 0:
			idx := make([]int, 0, len(n.indices))
			for i := range n.indices {
				idx = append(idx, i)
			}
			sort.Ints(idx)
			l := make([]any, 0, len(idx))
			for _, i := range idx {
				v, err := conv(n.indices[i])
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			return l, nil
		}
		m := map[string]any{}
		for k, c := range n.keys {
			v, err := conv(c)
			if err != nil {
				return nil, err
			}
			m[k] = v
		}
		return m, nil
	}
	v, err := conv(root)
	if err != nil {
		return nil, err
	}
	m, _ := v.(map[string]any)
	return m, nil
}

// flatTokens splits a flattened key: strings for map keys, ints for list
// positions.
func flatTokens(k string) []any {
	const mapSep, listSep = "__map_", "__list_"
	var out []any
	cur, isList := "", false
	flush := func() {
		if isList {
			i, _ := strconv.Atoi(cur)
			out = append(out, i)
		} else {
			out = append(out, cur)
		}
	}
	for len(k) > 0 {
		switch {
		case strings.HasPrefix(k, mapSep):
			flush()
			cur, isList, k = "", false, k[len(mapSep):]
		case strings.HasPrefix(k, listSep):
			flush()
			cur, isList, k = "", true, k[len(listSep):]
		default:
			cur += k[:1]
			k = k[1:]
		}
	}
	flush()
	return out
}

func emitDotenv(b branch) ([]byte, error) {
	var buf bytes.Buffer
	for _, it := range b {
		if c, ok := it.key.(comment); ok {
			buf.WriteString("#" + c.text + "\n")
			continue
		}
		var v string
		switch x := it.value.(type) {
		case string:
			v = strings.ReplaceAll(x, "\n", `\n`)
		case branch, []any:
			return nil, fmt.Errorf("%v: a nested value in a dotenv file", it.key)
		default:
			v = scalarString(x)
		}
		buf.WriteString(fmt.Sprintf("%s=%s\n", it.key, v))
	}
	return buf.Bytes(), nil
}

func scalarString(v any) string {
	switch v := v.(type) {
	case float64:
		s := strconv.FormatFloat(v, 'G', -1, 64)
		if !strings.ContainsAny(s, ".E") {
			s = strconv.FormatFloat(v, 'f', 1, 64)
		}
		return s
	case bool:
		return strconv.FormatBool(v)
	case time.Time:
		return v.Format(time.RFC3339)
	}
	return fmt.Sprint(v)
}
