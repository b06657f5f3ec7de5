package apply

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// Outcome is what happened to one resource in a run.
type Outcome string

// The outcomes.
const (
	Applied   Outcome = "applied"
	Unchanged Outcome = "unchanged"
	Failed    Outcome = "failed"
	Blocked   Outcome = "blocked"   // a dependency failed
	Skipped   Outcome = "skipped"   // removed from Git, kept without --prune
	Suspended Outcome = "suspended" // reconcile disabled, or the agent suspended
	Forgotten Outcome = "forgotten" // dropped from the inventory, left on the host
	Refused   Outcome = "refused"   // a policy refused it (a prune held)
)

// resultOf is the report's line for an engine's outcome.
func resultOf(o diff.Outcome) *Result {
	c := o.Change
	res := &Result{ID: c.ID, Kind: c.Kind, Path: c.Path, Action: c.Action, Reason: c.Reason, Err: o.Err, BlockedBy: o.BlockedBy}
	switch o.Verdict {
	case diff.InSync:
		res.Outcome = Unchanged
	case diff.Applied:
		res.Outcome, res.Files, res.Backups = Applied, c.FileCount(), c.Backups()
		if c.Action == diff.Forget {
			res.Outcome = Forgotten
		}
	case diff.Failed:
		res.Outcome = Failed
	case diff.Blocked, diff.Waiting:
		res.Outcome = Blocked
	case diff.Refused:
		switch {
		case errors.Is(o.Err, diff.ErrPruneOff):
			res.Outcome, res.Err = Skipped, nil
		case errors.Is(o.Err, diff.ErrDisabled), errors.Is(o.Err, diff.ErrSuspended):
			res.Outcome, res.Err = Suspended, nil
		default:
			res.Outcome = Refused
		}
	}
	return res
}

// MarshalJSON renders the error as its message.
func (r *Result) MarshalJSON() ([]byte, error) {
	type plain Result
	msg := ""
	if r.Err != nil {
		msg = r.Err.Error()
	}
	return json.Marshal(struct {
		*plain
		Error string `json:"error,omitempty"`
	}{(*plain)(r), msg})
}

// Result is one resource's outcome.
type Result struct {
	ID        resource.ID `json:"id"`
	Kind      string      `json:"kind"`
	Path      string      `json:"path,omitempty"`
	Action    diff.Action `json:"action"`
	Reason    diff.Reason `json:"reason,omitempty"`
	Outcome   Outcome     `json:"outcome"`
	Err       error       `json:"-"` // rendered as "error"
	BlockedBy resource.ID `json:"blockedBy,omitempty"`
	Files     int         `json:"files,omitempty"`   // changes inside a tree
	Backups   int         `json:"backups,omitempty"` // of which were backed up first
}

// Report is every outcome of a run.
type Report struct {
	Results []*Result `json:"results"`
}

// Failed reports whether any resource failed or was blocked.
func (r *Report) Failed() bool {
	for _, res := range r.Results {
		if res.Outcome == Failed || res.Outcome == Blocked {
			return true
		}
	}
	return false
}

// Applied lists what the run changed on the host (not what was unchanged,
// skipped or failed): what sync --wait waits for.
func (r *Report) Applied() []resource.ID {
	var ids []resource.ID
	for _, res := range r.Results {
		if res.Outcome == Applied && res.Action != diff.NoOp {
			ids = append(ids, res.ID)
		}
	}
	return ids
}

// Tried lists what the run changed or tried to change (applied, failed,
// blocked): what a revision's health gate judges it on. Never nil.
func (r *Report) Tried() []resource.ID {
	ids := []resource.ID{}
	for _, res := range r.Results {
		if res.Outcome == Applied || res.Outcome == Failed || res.Outcome == Blocked {
			ids = append(ids, res.ID)
		}
	}
	return ids
}

// past is an action done, in words.
func past(a diff.Action) string {
	switch a {
	case diff.Create:
		return "created"
	case diff.Update:
		return "updated"
	case diff.Delete:
		return "deleted"
	case diff.Forget:
		return "forgotten"
	case diff.Restart:
		return "restarted"
	case diff.Run:
		return "ran"
	case diff.Adopt:
		return "adopted"
	}
	return "unchanged"
}

// Text renders the report: one line per resource that did something, and a
// closing count.
func (r *Report) Text(w io.Writer) error {
	var b strings.Builder
	counts := map[string]int{}
	for _, res := range r.Results {
		line := ""
		switch res.Outcome {
		case Applied:
			line = past(res.Action)
			if res.Reason != "" {
				line += " (" + res.Reason.Phrase() + ")"
			}
			if res.Files > 0 {
				line += ", " + entries(res.Files)
			}
			if res.Backups > 0 {
				line += fmt.Sprintf(" (%d backed up first)", res.Backups)
			}
			counts[past(res.Action)]++
		case Unchanged:
			counts["unchanged"]++
			continue
		case Failed:
			line = "failed: " + res.Err.Error()
			counts["failed"]++
		case Blocked:
			line = "blocked: " + res.Err.Error()
			counts["blocked"]++
		case Refused:
			line = "refused: " + res.Err.Error()
			counts["refused"]++
		case Skipped:
			line = "kept: removed from Git; run sync --prune to delete it"
			counts["kept"]++
		case Suspended:
			line = "suspended: reconcile disabled, not changed"
			counts["suspended"]++
		case Forgotten:
			line = "forgotten: removed from Git, left on the host"
			counts["forgotten"]++
		}
		fmt.Fprintf(&b, "%s: %s\n", res.ID, line)
	}
	var parts []string
	for _, k := range []string{"created", "updated", "deleted", "restarted", "ran", "adopted", "unchanged", "forgotten", "kept", "suspended", "refused", "failed", "blocked"} {
		if counts[k] > 0 || k == "created" || k == "updated" || k == "deleted" {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		}
	}
	fmt.Fprintf(&b, "Sync: %s.\n", strings.Join(parts, ", "))
	_, err := io.WriteString(w, b.String())
	return err
}

// JSON renders the report for programs.
func (r *Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// entries counts a tree's entries in words: "1 entry", "3 entries".
func entries(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}
