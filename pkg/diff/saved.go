package diff

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// A saved plan (diff --out) is the JSON plan of docs/plan-json.md with what
// applying it later, exactly as reviewed, needs: where and against what it
// was made, the policy it was made for, per change a digest of the facts
// the change relied on, and a digest of the whole file.
//
// Nothing in the file is taken on trust: sync --plan makes the plan again
// and applies it only when what the fresh plan shows (every change's
// action, reason, attributes, content diff and files; the summary and the
// warnings) is byte for byte what the file shows, when every change's
// facts are what they were under the file's policy, and when the file's
// digest matches its content. The file is a claim, and apply checks it.

// DefaultLimit is the size of the largest saved plan sync --plan reads
// (--limit-plan-bytes), as the manifests' total (--limit-total-bytes):
// a saved plan lists each entry of a tree that changes once, in about
// 110 bytes, and a content diff up to 256 KiB, so 64 MiB holds a first
// sync of some 600,000 files. Past it, the file is refused before it is
// read.
const DefaultLimit = 64 << 20

// ErrTooLarge: a saved plan is larger than the limit it is read with.
var ErrTooLarge = errors.New("too large for a saved plan")

// MadeFor says where, and against which snapshot, a saved plan was made.
type MadeFor struct {
	Host     string    `json:"host"`     // the host's ID (machine ID)
	Root     string    `json:"root"`     // --root, absolute
	StateDir string    `json:"stateDir"` // absolute
	Lineage  string    `json:"lineage"`
	Serial   uint64    `json:"serial"`
	Time     time.Time `json:"time"` // display only
}

// SavedPolicy is what the plan was made for: which refusals it meets and
// whether what left Git is deleted.
type SavedPolicy struct {
	Prune             bool `json:"prune"`
	AllowEmpty        bool `json:"allowEmpty,omitempty"`
	AllowSourceChange bool `json:"allowSourceChange,omitempty"`
}

// savedFile is a saved plan as it is written and read: the JSON plan with
// madeFor and policy first, so that a reader sees them before the
// changes, and the digest last.
type savedFile struct {
	savedHead
	Changes []jsonChange `json:"changes"`
	Digest  string       `json:"digest"`
}

// savedHead is all of a saved plan but its changes and its digest.
type savedHead struct {
	FormatVersion string       `json:"formatVersion"`
	MadeFor       *MadeFor     `json:"madeFor,omitempty"`
	Policy        *SavedPolicy `json:"policy,omitempty"`
	Source        state.Source `json:"source"`
	Revision      string       `json:"revision"`
	HasChanges    bool         `json:"hasChanges"`
	Summary       Summary      `json:"summary"`
	Warnings      []string     `json:"warnings,omitempty"`
}

// Saved is a plan read back from its file: what it claims, to be checked
// against a plan made again (Differs).
type Saved struct {
	Source   state.Source
	Revision string
	MadeFor  MadeFor
	Policy   SavedPolicy

	head    savedHead
	changes []jsonChange // as the file lists them
	byID    map[string]int
	// edited says why the file's digest does not hold; "" when it does.
	edited string
}

// ErrNotSaved: the file is not a saved plan (a plan from diff -o json has
// no facts to check against).
var ErrNotSaved = errors.New("not a saved plan: make it with cortex-sync diff --out FILE")

// WriteSaved writes p as a saved plan, made for policy.
func WriteSaved(w io.Writer, p *Plan, made MadeFor, policy SavedPolicy) error {
	j := jsonOf(p)
	f := savedFile{savedHead: savedHead{FormatVersion: FormatVersion, MadeFor: &made, Policy: &policy,
		Source: p.Source, Revision: p.Revision, HasChanges: j.HasChanges, Summary: j.Summary, Warnings: j.Warnings}}
	f.savedHead = roundTrip(f.savedHead)
	f.Changes = make([]jsonChange, len(p.Changes))
	for i, c := range p.Changes {
		jc := j.Changes[i]
		jc.Facts = Facts(c, policy)
		f.Changes[i] = roundTrip(jc)
	}
	f.Digest = f.digest()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(f)
}

// roundTrip is v as it reads back from its JSON: what a plan file holds
// once written (text that is not UTF-8 reads back as U+FFFD), so that a
// fresh plan compares with a file byte for byte.
func roundTrip[T any](v T) T {
	b, err := json.Marshal(v)
	if err != nil {
		return v // a plan's values always encode
	}
	var out T
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}

// digest is the file's digest: SHA-256 over its head and each change, as
// JSON, in order. It proves no edit by a hand that recomputes it (a saved
// plan is not signed); it tells a file edited by hand from a host that
// moved.
func (f *savedFile) digest() string {
	h := sha256.New()
	writeJSON(h, f.savedHead)
	for i := range f.Changes {
		writeJSON(h, &f.Changes[i])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func writeJSON(h hash.Hash, v any) {
	b, _ := json.Marshal(v)
	h.Write(b)
	h.Write([]byte{'\n'})
}

// ReadSaved reads a saved plan of at most limit bytes (0: DefaultLimit),
// one change at a time: memory follows the plan, never the bytes past the
// limit. A field it does not know, or one given twice, is an error.
func ReadSaved(r io.Reader, limit int64) (*Saved, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	dec := json.NewDecoder(&capped{r: r, left: limit, limit: limit})
	var f savedFile
	if err := decodeFile(dec, &f); err != nil {
		var big *tooLarge
		if errors.As(err, &big) {
			return nil, big
		}
		return nil, fmt.Errorf("not a plan cortex-sync wrote: %w", err)
	}
	if f.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("plan format %q; this cortex-sync reads %q", f.FormatVersion, FormatVersion)
	}
	if f.MadeFor == nil || f.Policy == nil {
		return nil, ErrNotSaved
	}
	if f.Digest == "" {
		return nil, fmt.Errorf("%w (it has no digest: made by an older cortex-sync)", ErrNotSaved)
	}
	s := &Saved{Source: f.Source, Revision: f.Revision, MadeFor: *f.MadeFor, Policy: *f.Policy,
		head: f.savedHead, changes: f.Changes, byID: make(map[string]int, len(f.Changes))}
	for i, c := range f.Changes {
		if c.Facts == "" {
			return nil, fmt.Errorf("%w (%s has no facts)", ErrNotSaved, c.ID)
		}
		if _, dup := s.byID[c.ID]; dup {
			return nil, fmt.Errorf("not a plan cortex-sync wrote: %s is listed twice", c.ID)
		}
		s.byID[c.ID] = i
	}
	if sum := f.digest(); sum != f.Digest {
		s.edited = fmt.Sprintf("the plan file was edited: its digest %s does not match its content (%s)", f.Digest, sum)
	}
	return s, nil
}

// tooLarge: a plan file is larger than the limit; size 0 when only
// reading found out.
type tooLarge struct{ size, limit int64 }

func (e *tooLarge) Error() string {
	limit := fmt.Sprintf("more than the %s a saved plan may be (--limit-plan-bytes)", sizeText(e.limit))
	if e.size > 0 {
		return sizeText(e.size) + ", " + limit
	}
	return limit
}

func (e *tooLarge) Unwrap() error { return ErrTooLarge }

// CheckSize refuses a plan file of size bytes, before it is read, when it
// is larger than limit (0: DefaultLimit).
func CheckSize(size, limit int64) error {
	if limit <= 0 {
		limit = DefaultLimit
	}
	if size > limit {
		return &tooLarge{size: size, limit: limit}
	}
	return nil
}

// sizeText is a size in words: "64 MiB", "1.5 GiB", "100 bytes".
func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// capped reads at most limit bytes, and fails past them.
type capped struct {
	r           io.Reader
	left, limit int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		n, err := c.r.Read(one[:])
		if n > 0 {
			return 0, &tooLarge{limit: c.limit}
		}
		return 0, err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// decodeFile decodes a saved plan from dec one top-level field, and one
// change, at a time, so that the decoder holds one change's bytes at most.
func decodeFile(dec *json.Decoder, f *savedFile) error {
	if err := delim(dec, '{'); err != nil {
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := t.(string)
		if seen[key] {
			return fmt.Errorf("%q is given twice", key)
		}
		seen[key] = true
		switch key {
		case "formatVersion":
			err = decodeValue(dec, &f.FormatVersion)
		case "madeFor":
			err = decodeValue(dec, &f.MadeFor)
		case "policy":
			err = decodeValue(dec, &f.Policy)
		case "source":
			err = decodeValue(dec, &f.Source)
		case "revision":
			err = decodeValue(dec, &f.Revision)
		case "hasChanges":
			err = decodeValue(dec, &f.HasChanges)
		case "summary":
			err = decodeValue(dec, &f.Summary)
		case "warnings":
			err = decodeValue(dec, &f.Warnings)
		case "digest":
			err = decodeValue(dec, &f.Digest)
		case "changes":
			if err = delim(dec, '['); err != nil {
				return err
			}
			for dec.More() {
				var c jsonChange
				if err := decodeValue(dec, &c); err != nil {
					return fmt.Errorf("change %d: %w", len(f.Changes)+1, err)
				}
				f.Changes = append(f.Changes, c)
			}
			err = delim(dec, ']')
		default:
			return fmt.Errorf("unknown field %q", key)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	if err := delim(dec, '}'); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("more after the plan")
		}
		return err
	}
	return nil
}

func delim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t != want {
		return fmt.Errorf("%v where %v belongs", t, want)
	}
	return nil
}

// decodeValue decodes dec's next value into v: strictly (a field v does
// not have is an error), and a field given twice is an error, since a
// person reading the file would see the first and the decoder keep the
// last.
func decodeValue(dec *json.Decoder, v any) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	if err := noTwice(raw); err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// noTwice fails when an object in raw names a field twice.
func noTwice(raw []byte) error {
	if !bytes.Contains(raw, []byte{'{'}) {
		return nil
	}
	type frame struct {
		keys      map[string]bool
		obj, want bool // an object; one that wants a key next
	}
	var stack []*frame
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		t, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.want {
			if t == json.Delim('}') {
				stack = stack[:len(stack)-1]
				continue
			}
			key, _ := t.(string)
			if top.keys[key] {
				return fmt.Errorf("%q is given twice", key)
			}
			top.keys[key], top.want = true, false
			continue
		}
		if top != nil && top.obj {
			top.want = true // after this value, a key
		}
		switch t {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, obj: true, want: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

// Facts is a digest of everything about c that its action relies on: what
// was observed of the host, the record and the desired state, what the
// change would do (its attributes, content and files), and, for a prune,
// the policy that decides whether it runs. Two plans whose changes have
// the same facts do the same thing.
func Facts(c *Change, policy SavedPolicy) string {
	var p *SavedPolicy
	if c.Prune {
		p = &policy
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.Encode(struct {
		ID        string
		Action    Action
		Reason    Reason
		Prune     bool
		Suspended bool
		Error     string
		Observed  Observation
		Attrs     []Attr
		Content   *Content
		Files     []FileChange
		Policy    *SavedPolicy `json:",omitempty"`
	}{string(c.ID), c.Action, c.Reason, c.Prune, c.Suspended, errText(c.Err), c.Observed, c.Attrs, c.Content, c.Files, p})
	sum := sha256.Sum256(b.Bytes())
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Differs compares a fresh plan, made under the saved plan's policy, with
// the saved one, and names, in words, every difference: the file edited
// since it was written, a change whose action, reason, attributes,
// content diff or files are not what the file shows, whose facts moved,
// that the file's policy would decide otherwise than it was planned, new
// or gone; the summary and the warnings. None: the fresh plan does
// exactly what the file shows.
func (s *Saved) Differs(fresh *Plan) []string {
	var out []string
	if s.edited != "" {
		out = append(out, s.edited)
	}
	j := jsonOf(fresh)
	now := roundTrip(savedHead{HasChanges: j.HasChanges, Summary: j.Summary, Warnings: j.Warnings})
	if now.HasChanges != s.head.HasChanges || now.Summary != s.head.Summary {
		out = append(out, fmt.Sprintf("summary: the plan shows %s; this sync has %s", summaryText(s.head), summaryText(now)))
	}
	if !slices.Equal(now.Warnings, s.head.Warnings) {
		out = append(out, fmt.Sprintf("warnings: the plan shows %q; this sync has %q", s.head.Warnings, now.Warnings))
	}
	var changes, policy []string
	seen := make(map[string]bool, len(fresh.Changes))
	order := true
	for i, c := range fresh.Changes {
		id := string(c.ID)
		seen[id] = true
		k, ok := s.byID[id]
		if !ok {
			changes = append(changes, fmt.Sprintf("%s: not in the plan; now %s", id, describe(c.Action, c.Reason)))
			continue
		}
		order = order && k == i
		was, is := &s.changes[k], roundTrip(j.Changes[i])
		shown := shownDiffers(was, &is)
		changes = append(changes, shown...)
		if was.Facts == Facts(c, s.Policy) {
			continue
		}
		if p, ok := s.plannedWith(c, was.Facts); ok {
			policy = append(policy, policyDiffers(s.Policy, p, id)...)
			continue
		}
		if len(shown) > 0 {
			continue // named above
		}
		if s.edited != "" {
			changes = append(changes, fmt.Sprintf("%s: facts: the plan shows %s; this sync has %s", id, was.Facts, Facts(c, s.Policy)))
		} else {
			changes = append(changes, fmt.Sprintf("%s: planned %s; the host or the record changed since", id, describe(was.Action, was.Reason)))
		}
	}
	for _, was := range s.changes {
		if !seen[was.ID] {
			changes = append(changes, fmt.Sprintf("%s: planned %s; now nothing to do with it", was.ID, describe(was.Action, was.Reason)))
		}
	}
	if len(changes) == 0 && !order {
		out = append(out, "changes: listed in another order than this sync would apply them")
	}
	slices.Sort(changes)
	out = append(out, compact(policy)...)
	return append(out, changes...)
}

// summaryText is a plan's hasChanges and summary as its JSON shows them.
func summaryText(h savedHead) string {
	b, _ := json.Marshal(struct {
		HasChanges bool    `json:"hasChanges"`
		Summary    Summary `json:"summary"`
	}{h.HasChanges, h.Summary})
	return string(b)
}

// plannedWith finds the policy, other than the file's, under which c
// has the facts the file shows: the policy was edited.
func (s *Saved) plannedWith(c *Change, facts string) (SavedPolicy, bool) {
	if !c.Prune {
		return SavedPolicy{}, false
	}
	for n := range 8 {
		p := SavedPolicy{Prune: n&1 != 0, AllowEmpty: n&2 != 0, AllowSourceChange: n&4 != 0}
		if p != s.Policy && Facts(c, p) == facts {
			return p, true
		}
	}
	return SavedPolicy{}, false
}

// policyDiffers names the fields of the file's policy that say otherwise
// than the policy change id was planned with.
func policyDiffers(file, planned SavedPolicy, id string) []string {
	var out []string
	for _, f := range []struct {
		name        string
		file, today bool
	}{{"prune", file.Prune, planned.Prune}, {"allowEmpty", file.AllowEmpty, planned.AllowEmpty}, {"allowSourceChange", file.AllowSourceChange, planned.AllowSourceChange}} {
		if f.file != f.today {
			out = append(out, fmt.Sprintf("policy.%s: the plan file says %v; it was planned with %v (%s)", f.name, f.file, f.today, id))
		}
	}
	return out
}

// compact folds lines "X (id)" with the same X into one naming every id.
func compact(lines []string) []string {
	var out []string
	ids := map[string][]string{}
	for _, l := range lines {
		i := strings.LastIndex(l, " (")
		head, id := l[:i], strings.TrimSuffix(l[i+2:], ")")
		if _, ok := ids[head]; !ok {
			out = append(out, head)
		}
		ids[head] = append(ids[head], id)
	}
	for i, head := range out {
		out[i] = head + " (" + few(ids[head], 3) + ")"
	}
	return out
}

// few names up to n of ids and counts the rest.
func few(ids []string, n int) string {
	s := strings.Join(ids[:min(n, len(ids))], ", ")
	if len(ids) > n {
		s += fmt.Sprintf(" and %d more", len(ids)-n)
	}
	return s
}

// shownDiffers names each field of a change that the file shows otherwise
// than the fresh plan: the file shows was, the fresh plan is.
func shownDiffers(was, is *jsonChange) []string {
	var out []string
	id := was.ID
	field := func(name, file, now string) {
		out = append(out, fmt.Sprintf("%s: %s: the plan shows %s; this sync has %s", id, name, file, now))
	}
	if was.Action != is.Action || was.Reason != is.Reason {
		out = append(out, fmt.Sprintf("%s: planned %s; now %s", id, describe(was.Action, was.Reason), describe(is.Action, is.Reason)))
	}
	if was.Kind != is.Kind {
		field("kind", quoted(was.Kind), quoted(is.Kind))
	}
	if was.Path != is.Path {
		field("path", quoted(was.Path), quoted(is.Path))
	}
	for _, b := range []struct {
		name      string
		file, now bool
	}{{"drift", was.Drift, is.Drift}, {"prune", was.Prune, is.Prune}, {"suspended", was.Suspended, is.Suspended}} {
		if b.file != b.now {
			field(b.name, fmt.Sprint(b.file), fmt.Sprint(b.now))
		}
	}
	if was.Error != is.Error {
		field("error", quoted(was.Error), quoted(is.Error))
	}
	if !slices.Equal(was.Attrs, is.Attrs) {
		field("attributes", attrsText(was.Attrs), attrsText(is.Attrs))
	}
	var wc, ic Content
	if was.Content != nil {
		wc = *was.Content
	}
	if is.Content != nil {
		ic = *is.Content
	}
	if wc.Summary != ic.Summary {
		field("content summary", quoted(wc.Summary), quoted(ic.Summary))
	}
	if wc.Diff != ic.Diff {
		n, a, b := firstLineDiffers(wc.Diff, ic.Diff)
		out = append(out, fmt.Sprintf("%s: content diff, line %d: the plan shows %q; this sync has %q", id, n, a, b))
	}
	if !slices.Equal(was.Files, is.Files) {
		n := 0
		for n < min(len(was.Files), len(is.Files)) && was.Files[n] == is.Files[n] {
			n++
		}
		field(fmt.Sprintf("files[%d]", n), fileText(was.Files, n), fileText(is.Files, n))
	}
	return out
}

func quoted(s string) string { return fmt.Sprintf("%q", s) }

func attrsText(as []Attr) string {
	if len(as) == 0 {
		return "none"
	}
	var parts []string
	for _, a := range as {
		parts = append(parts, a.phrase(quoted))
	}
	return strings.Join(parts, ", ")
}

func fileText(fs []FileChange, i int) string {
	if i >= len(fs) {
		return "no more files"
	}
	f := fs[i]
	s := fmt.Sprintf("%s %q (%s)", f.Action, f.Path, f.Reason.Phrase())
	if f.Backup {
		s += ", backed up first"
	}
	if f.Count > 1 {
		s += fmt.Sprintf(" x%d", f.Count)
	}
	return s
}

// firstLineDiffers is the first line, 1-based, at which a and b differ,
// and that line of each ("" past the end).
func firstLineDiffers(a, b string) (int, string, string) {
	la, lb := strings.SplitAfter(a, "\n"), strings.SplitAfter(b, "\n")
	for i := 0; ; i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y || i >= len(la) && i >= len(lb) {
			return i + 1, strings.TrimSuffix(x, "\n"), strings.TrimSuffix(y, "\n")
		}
	}
}

// describe is an action and its reason, in words.
func describe(a Action, r Reason) string {
	if a == NoOp || a == "" {
		return "no change"
	}
	return string(a) + " (" + r.Phrase() + ")"
}
