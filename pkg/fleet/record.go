package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Every member of a fleet can write every key of it (etcd grants by
// prefix, and every agent needs the fleet's), and members may run
// different versions of cortex-sync during an upgrade. So nothing read
// from a fleet's keys is trusted as if this cortex-sync had written it:
// each record goes through decode, the one way a value read becomes a
// record, and a record that does not pass is ignored, with a reason that
// is logged and reported (fleet status, the host's status). docs/fleet.md
// has the trust model.

// Schema is the version of the records this cortex-sync writes, in each
// record's "schema" field. A change of a record's shape bumps it. A reader
// reads every schema up to its own (a record without the field was
// written before it existed, in the shape of schema 1); it ignores a
// record of a newer schema by name, so an older host shares its fleet
// with newer ones during an upgrade without misreading their records.
// Schema 2 added deploy windows: a rollout's windows, a host's
// windowOpens.
const Schema = 3

// maxRecordBytes bounds a record read from etcd: the largest a host
// writes (its status) is a few KiB.
const maxRecordBytes = 64 << 10

// What a host writes is bounded below maxRecordBytes: a text (an error,
// a reason) to maxTextBytes, a list of resources to maxListed.
const (
	maxTextBytes = 4 << 10
	maxListed    = 50
)

// maxNameBytes bounds a host or fleet name: a DNS name's length.
const maxNameBytes = 253

// ErrNewerSchema is wrapped by the reason a record of a newer schema is
// ignored.
var ErrNewerSchema = errors.New("written by a newer cortex-sync")

// record is a value read from a fleet's keys.
type record interface {
	// check validates the record and fills what it left out; its error
	// says what is wrong.
	check() error
}

// decode reads one record: bounded, a JSON object of a schema this
// cortex-sync reads, strictly (a field it does not know is an error, as
// in a manifest), and valid by the record's own check. Its error says why
// the record is ignored.
func decode[T any, P interface {
	*T
	record
}](value []byte) (T, error) {
	var v T
	if len(value) > maxRecordBytes {
		return v, fmt.Errorf("is %d bytes, more than a record may be (%d)", len(value), maxRecordBytes)
	}
	var head struct {
		Schema *json.Number `json:"schema"`
	}
	if err := json.Unmarshal(value, &head); err != nil {
		return v, fmt.Errorf("is not a JSON object: %s", printed(err.Error()))
	}
	if head.Schema != nil {
		n, err := head.Schema.Int64()
		if err != nil || n < 0 {
			return v, fmt.Errorf("schema %s is not a version number", head.Schema)
		}
		if n > Schema {
			return v, fmt.Errorf("%w (schema %d; this one reads up to %d): upgrade this host to read it", ErrNewerSchema, n, Schema)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, fmt.Errorf("does not decode: %s", printed(err.Error())) // it may quote the value
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return v, errors.New("does not decode: more than one JSON value")
	}
	if err := P(&v).check(); err != nil {
		return v, err
	}
	return v, nil
}

// Ignored is a record read from a fleet's keys and ignored: its key,
// below the fleet's prefix, and why.
type Ignored struct {
	Key string `json:"key"`
	Why string `json:"why"`
}

func (i Ignored) String() string { return i.Key + ": " + i.Why }

// ignore notes that the record at kv is ignored, and why: logged once per
// version of the key.
func (c *Client) ignore(kv *kvPair, err error) Ignored {
	ig := Ignored{Key: strings.TrimPrefix(kv.key, c.prefix), Why: err.Error()}
	c.mu.Lock()
	if c.logged == nil || len(c.logged) > 1000 {
		c.logged = map[string]int64{}
	}
	first := c.logged[kv.key] != kv.modRev
	c.logged[kv.key] = kv.modRev
	c.mu.Unlock()
	if first {
		c.log.Warn("fleet record ignored", "key", clip(ig.Key, 200), "reason", ig.Why)
	}
	return ig
}

// checkHost refuses a host name, read from a key or a record, that no
// member could have joined with.
func checkHost(n string) error {
	if err := checkName(n); err != nil {
		return fmt.Errorf("host name %q %w", clip(n, 64), err)
	}
	return nil
}

// clip shortens s to n bytes at most (for a log line or an error), on a
// rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func (s *specDoc) check() error {
	if s.Revision == "" {
		return errors.New("names no revision")
	}
	ro, err := s.Rollout.Settle()
	if err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	s.Rollout = ro
	return nil
}

func (s *controlDoc) check() error {
	switch s.State {
	case StateActive, StatePaused, StateAborted:
		return nil
	}
	return fmt.Errorf("state %q is none of %s, %s, %s", clip(s.State, 64), StateActive, StatePaused, StateAborted)
}

func (s *slotDoc) check() error {
	if s.Revision == "" || s.At.IsZero() {
		return errors.New("names no revision, or no time")
	}
	return nil
}

func (*verdictDoc) check() error { return nil }
func (*holdDoc) check() error    { return nil }

func (s *HostStatus) check() error { return checkHost(s.Host) }

// printed is s, a text that may carry what another host wrote, fit for
// a log line, an error or a terminal: control characters as '?', at most
// 300 bytes.
func printed(s string) string {
	return clip(strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?")), 300)
}

// printable reports whether s holds nothing a terminal would act on.
func printable(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}
