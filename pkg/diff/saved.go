package diff

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// A saved plan (diff --out) is the JSON plan of docs/plan-json.md with what
// applying it later, exactly as reviewed, needs: where and against what it
// was made, the policy it was made for, and per change a digest of the
// facts the change relied on. sync --plan makes the plan again and applies
// it only when every one of those is still what it was.

// MadeFor says where, and against which snapshot, a saved plan was made.
type MadeFor struct {
	Host     string    `json:"host"`     // the host's ID (machine ID)
	Root     string    `json:"root"`     // --root, absolute
	StateDir string    `json:"stateDir"` // absolute
	Lineage  string    `json:"lineage"`
	Serial   uint64    `json:"serial"`
	Time     time.Time `json:"time"`
}

// SavedPolicy is what the plan was made for: which refusals it meets and
// whether what left Git is deleted.
type SavedPolicy struct {
	Prune             bool `json:"prune"`
	AllowEmpty        bool `json:"allowEmpty,omitempty"`
	AllowSourceChange bool `json:"allowSourceChange,omitempty"`
}

// Saved is a plan read back from its file.
type Saved struct {
	Source   state.Source
	Revision string
	MadeFor  MadeFor
	Policy   SavedPolicy
	// Facts holds each change's facts digest, by resource ID.
	Facts map[string]string
	// Changes are the changes as reviewed, for naming what moved.
	Changes map[string]SavedChange
}

// SavedChange is one change as a saved plan shows it.
type SavedChange struct {
	Action Action
	Reason Reason
}

// ErrNotSaved: the file is not a saved plan (a plan from diff -o json has
// no facts to check against).
var ErrNotSaved = errors.New("not a saved plan: make it with cortex-sync diff --out FILE")

// WriteSaved writes p as a saved plan.
func WriteSaved(w io.Writer, p *Plan, made MadeFor, policy SavedPolicy) error {
	out := jsonOf(p)
	out.MadeFor, out.Policy = &made, &policy
	for i, c := range p.Changes {
		out.Changes[i].Facts = Facts(c)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// ReadSaved reads a saved plan; a field it does not know is an error.
func ReadSaved(r io.Reader) (*Saved, error) {
	var in struct {
		jsonPlan
		Source state.Source `json:"source"`
	}
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("not a plan cortex-sync wrote: %w", err)
	}
	if in.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("plan format %q; this cortex-sync reads %q", in.FormatVersion, FormatVersion)
	}
	if in.MadeFor == nil || in.Policy == nil {
		return nil, ErrNotSaved
	}
	s := &Saved{Source: in.Source, Revision: in.Revision, MadeFor: *in.MadeFor, Policy: *in.Policy,
		Facts: map[string]string{}, Changes: map[string]SavedChange{}}
	for _, c := range in.Changes {
		if c.Facts == "" {
			return nil, fmt.Errorf("%w (%s has no facts)", ErrNotSaved, c.ID)
		}
		s.Facts[c.ID] = c.Facts
		s.Changes[c.ID] = SavedChange{Action: c.Action, Reason: c.Reason}
	}
	return s, nil
}

// Facts is a digest of everything about c that its action relies on: what
// was observed of the host, the record and the desired state, and what the
// change would do (its attributes, content and files). Two plans whose
// changes have the same facts do the same thing.
func Facts(c *Change) string {
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
	}{string(c.ID), c.Action, c.Reason, c.Prune, c.Suspended, errText(c.Err), c.Observed, c.Attrs, c.Content, c.Files})
	sum := sha256.Sum256(b.Bytes())
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Moved compares a fresh plan with a saved one and names, in words, what
// moved: changes whose facts differ, changes new or gone. None: the fresh
// plan does exactly what was reviewed.
func (s *Saved) Moved(fresh *Plan) []string {
	var moved []string
	seen := map[string]bool{}
	for _, c := range fresh.Changes {
		id := string(c.ID)
		seen[id] = true
		was, ok := s.Changes[id]
		switch {
		case !ok:
			moved = append(moved, fmt.Sprintf("%s: not in the plan; now %s", id, describe(c.Action, c.Reason)))
		case s.Facts[id] != Facts(c):
			now := describe(c.Action, c.Reason)
			if then := describe(was.Action, was.Reason); then != now {
				moved = append(moved, fmt.Sprintf("%s: planned %s; now %s", id, then, now))
			} else {
				moved = append(moved, fmt.Sprintf("%s: planned %s; the host or the record changed since", id, then))
			}
		}
	}
	for id, was := range s.Changes {
		if !seen[id] {
			moved = append(moved, fmt.Sprintf("%s: planned %s; now nothing to do with it", id, describe(was.Action, was.Reason)))
		}
	}
	slices.Sort(moved)
	return moved
}

// describe is an action and its reason, in words.
func describe(a Action, r Reason) string {
	if a == NoOp {
		return "no change"
	}
	return string(a) + " (" + r.Phrase() + ")"
}
