package reconcile

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Status is the status document: status -o json and /api/v1/status.
type Status struct {
	StateDir string       `json:"stateDir"`
	Source   state.Source `json:"source"`
	// Revision is the last revision applied in full.
	Revision     string     `json:"revision"`
	LastSyncTime *time.Time `json:"lastSyncTime"`
	// LastAttempt is the last sync that ran, with what did not apply.
	LastAttempt *state.Attempt `json:"lastAttempt,omitempty"`
	// RolledBack says why the snapshot is older than the last one this
	// state dir wrote (a backup put back): prune is refused until the user
	// accepts it.
	RolledBack string `json:"rolledBack,omitempty"`
	// LastGood is the last revision known good (revisions.go).
	LastGood *state.Known `json:"lastGood,omitempty"`
	// OnRollback: a rollback holds the host on an earlier revision than
	// its source's head; status exits 1 while it does.
	OnRollback *state.Pin `json:"onRollback,omitempty"`
	// Verdict is the health verdict of the revision the host converges
	// to: the revision on trial (pending, since its apply began), or the
	// one it is on, good, or bad and why; nil when it was not judged.
	Verdict *state.Applied `json:"verdict,omitempty"`
	// Agent is what the agent running on this state dir knows beyond the
	// snapshot (a refused revision, suspended, what it holds back); nil
	// when none runs.
	Agent     *AgentReport     `json:"agent,omitempty"`
	Sync      health.Sync      `json:"sync"`
	Health    health.Status    `json:"health"`
	Resources []ResourceStatus `json:"resources"`
}

type ResourceStatus struct {
	ID     string        `json:"id"`
	Kind   string        `json:"kind"`
	Path   string        `json:"path,omitempty"`
	Sync   health.Sync   `json:"sync"`
	Health health.Status `json:"health"`
	Reason string        `json:"reason,omitempty"`
	// LastApplied is the outcome of the last sync that touched it.
	LastApplied *state.Result `json:"lastApplied,omitempty"`
	// A process's pid, restarts, last exit and log; a command's last run.
	*diff.Runtime
}

// Status judges every resource the way diff does: against the
// source when one is given, else against what was last applied (recalled
// from the snapshot).
func (s *Session) Status(ctx context.Context) *Status {
	view := s.w.View()
	doc := &Status{StateDir: s.State.Path(), Source: view.Source, Revision: view.Revision, LastAttempt: view.LastAttempt, RolledBack: view.RolledBack, Resources: []ResourceStatus{}}
	if !view.LastSyncTime.IsZero() {
		doc.LastSyncTime = &view.LastSyncTime
	}
	doc.Agent = ReadAgentReport(s.State)
	doc.LastGood, doc.OnRollback = view.LastGood, view.Pin
	rev := view.Revision
	if doc.Agent != nil && doc.Agent.Revision != "" {
		rev = doc.Agent.Revision
	}
	if tr := view.Trial(); tr != nil {
		doc.Verdict = tr // the revision on trial, whatever was applied in full before it
	} else if a := view.Latest(rev); a != nil && a.Verdict != "" {
		doc.Verdict = a
	}
	plan := s.Plan(ctx)
	seen := map[string]bool{}
	for _, c := range plan.Changes {
		r := fromChange(c)
		if f := view.LastAttempt.FailureOf(r.ID); f != nil && c.Err == nil && (r.LastApplied == nil || r.LastApplied.Error == "") {
			r.Health = health.Worst(r.Health, health.Degraded)
			r.Reason = strings.TrimPrefix(r.Reason+"; last sync failed: "+f.Error, "; ")
		}
		if a := view.LastAttempt; c.Action == diff.NoOp && a != nil && a.Keeps(a.Revision, r.ID) {
			// Judged against what was applied it matches; Git no longer has it.
			r.Sync, r.Reason = health.OutOfSync, "removed from Git; kept without --prune: sync --prune deletes it"
		}
		seen[r.ID] = true
		doc.Resources = append(doc.Resources, r)
	}
	// Failed before it was ever applied, and not in the source given (or
	// no source): still shown, with its error.
	if a := view.LastAttempt; a != nil {
		for _, f := range a.Failed {
			if !seen[f.ID] {
				doc.Resources = append(doc.Resources, ResourceStatus{ID: f.ID, Kind: f.Kind, Path: f.Path, Sync: health.OutOfSync, Health: health.Missing, Reason: "never applied; last sync failed: " + f.Error})
			}
		}
	}
	doc.Sync, doc.Health = health.Synced, health.Healthy
	var all []health.Status
	for i := range doc.Resources {
		r := &doc.Resources[i]
		if r.LastApplied != nil && r.LastApplied.Error != "" && r.Health == health.Healthy {
			r.Health, r.Reason = health.Degraded, "last apply failed: "+r.LastApplied.Error
		}
		if r.Sync == health.OutOfSync {
			doc.Sync = health.OutOfSync
		}
		all = append(all, r.Health)
	}
	doc.Health = health.Worst(all...)
	if doc.LastSyncTime == nil && len(doc.Resources) == 0 {
		doc.Sync, doc.Health = health.OutOfSync, health.Unknown
	}
	return doc
}

// Converged is what status's exit code says: synced, and nothing missing,
// degraded or unknown; the agent, when one runs, refuses no revision; no
// rollback holds the host, and the revision it is on was not judged bad.
func (d *Status) Converged() bool {
	if d.Agent != nil && d.Agent.Refused != nil || d.OnRollback != nil || d.Verdict != nil && d.Verdict.Verdict == state.Bad {
		return false
	}
	return d.Sync == health.Synced && (d.Health == health.Healthy || d.Health == health.Progressing || d.Health == health.Suspended)
}

// fromChange turns a planned change into a resource's status.
func fromChange(c *diff.Change) ResourceStatus {
	r := ResourceStatus{ID: string(c.ID), Kind: c.Kind, Path: c.Path, Sync: c.Status(), Health: c.Health, Runtime: c.Runtime}
	if c.Record != nil {
		r.LastApplied = c.Record.Result
	}
	switch {
	case c.Err != nil:
		r.Health, r.Reason = health.Unknown, c.Err.Error()
	case c.Suspended:
		r.Health = health.Suspended
		if c.Action != diff.NoOp {
			r.Reason = "reconcile disabled; " + c.Reason.Phrase()
		}
	case c.Action != diff.NoOp:
		r.Reason = c.Reason.Phrase()
		if what := changed(c); c.Action == diff.Update && what != "" {
			r.Reason += " (" + what + ")"
		}
		if c.Drifted > 0 {
			r.Reason = fmt.Sprintf("%s (%s drifted)", r.Reason, count(c.Drifted, "file"))
		}
	}
	if c.Detail != "" {
		r.Reason = strings.TrimPrefix(r.Reason+": "+c.Detail, ": ")
	}
	return r
}

// changed names what an update changes: content, attributes, a type.
func changed(c *diff.Change) string {
	var what []string
	if c.Content != nil {
		what = append(what, "content")
	}
	for _, a := range c.Attrs {
		what = append(what, a.Field)
	}
	return strings.Join(what, ", ")
}
