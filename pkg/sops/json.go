package sops

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The JSON form (and the binary one, which is JSON with a "data" string),
// read in order and written as sops does: tab-indented, a newline after.

func loadJSON(in []byte) (*document, error) {
	d := json.NewDecoder(bytes.NewReader(in))
	d.UseNumber()
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	if t != json.Delim('{') {
		return nil, errors.New("the top level is not an object")
	}
	b, err := jsonObject(d)
	if err != nil {
		return nil, err
	}
	return withMetadata([]branch{b})
}

func jsonNumber(t json.Token) (any, error) {
	n, ok := t.(json.Number)
	if !ok {
		return t, nil
	}
	if i, err := n.Int64(); err == nil {
		return int(i), nil
	}
	return n.Float64()
}

func jsonValue(d *json.Decoder, t json.Token) (any, error) {
	switch t {
	case json.Delim('{'):
		return jsonObject(d)
	case json.Delim('['):
		var l []any
		for {
			t, err := d.Token()
			if err != nil {
				return nil, err
			}
			if t == json.Delim(']') {
				return l, nil
			}
			v, err := jsonValue(d, t)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
	}
	return jsonNumber(t)
}

func jsonObject(d *json.Decoder) (branch, error) {
	var b branch
	for {
		t, err := d.Token()
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		if t == json.Delim('}') {
			return b, nil
		}
		k, ok := t.(string)
		if !ok {
			return nil, fmt.Errorf("an object key is not a string")
		}
		t, err = d.Token()
		if err != nil {
			return nil, err
		}
		v, err := jsonValue(d, t)
		if err != nil {
			return nil, err
		}
		b = append(b, item{key: k, value: v})
	}
}

func emitJSON(b branch) ([]byte, error) {
	var compact bytes.Buffer
	if err := jsonEncode(&compact, b); err != nil {
		return nil, fmt.Errorf("writing JSON: %w", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, compact.Bytes(), "", "\t"); err != nil {
		return nil, fmt.Errorf("writing JSON: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

func jsonEncode(w *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case branch:
		w.WriteByte('{')
		first := true
		for _, it := range v {
			k, ok := it.key.(string)
			if !ok {
				continue // a comment
			}
			if !first {
				w.WriteByte(',')
			}
			first = false
			kb, _ := json.Marshal(k)
			w.Write(kb)
			w.WriteString(": ")
			if err := jsonEncode(w, it.value); err != nil {
				return err
			}
		}
		w.WriteByte('}')
		return nil
	case []any:
		w.WriteByte('[')
		first := true
		for _, e := range v {
			if _, ok := e.(comment); ok {
				continue
			}
			if !first {
				w.WriteByte(',')
			}
			first = false
			if err := jsonEncode(w, e); err != nil {
				return err
			}
		}
		w.WriteByte(']')
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Write(b)
	return nil
}
