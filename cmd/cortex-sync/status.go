package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// timeNow is the clock; one place to read it.
func timeNow() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

type statusOptions struct {
	src    sourceFlags
	output string
	verify bool
}

func newStatusCmd(g *globals, io streams) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show sync status and health per resource and overall",
		Long: `status reads the snapshot and observes the host: the last applied revision
and time, and for every resource whether the host still matches what was
applied (Synced, OutOfSync) and its health (Healthy, Progressing, Degraded,
Missing, Suspended, Unknown). It needs no source: the desired state is then
what was last applied, judged exactly as diff and sync judge it. Given a
source (--dir, --repo), it compares with that instead.

Exit codes: 0 when everything is Synced and Healthy (or Progressing or
Suspended), 1 when something is OutOfSync, Missing, Degraded or Unknown or
nothing was ever synced here, 2 when status could not be determined.`,
		Example: `  # What was applied, and does the host still match it?
  cortex-sync status

  # The same as one JSON document, for programs
  cortex-sync status -o json

  # Compare with a source instead of the last applied state
  cortex-sync status --dir ./repo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := statusRun(cmd, g, o, io)
			var ee *exitError
			if err != nil && !errors.As(err, &ee) {
				return &exitError{code: exitTrouble, err: err}
			}
			return err
		},
	}
	o.src.add(cmd)
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "text or json")
	cmd.Flags().BoolVar(&o.verify, "verify", false, "hash every file instead of trusting unchanged stats")
	return cmd
}

// statusDoc is status -o json and /api/v1/status.
type statusDoc struct {
	StateDir string       `json:"stateDir"`
	Source   state.Source `json:"source"`
	// Revision is the last revision applied in full.
	Revision     string     `json:"revision"`
	LastSyncTime *time.Time `json:"lastSyncTime"`
	// LastAttempt is the last sync that ran, with what did not apply.
	LastAttempt *state.Attempt   `json:"lastAttempt,omitempty"`
	Sync        health.Sync      `json:"sync"`
	Health      health.Status    `json:"health"`
	Resources   []resourceStatus `json:"resources"`
}

type resourceStatus struct {
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

func statusRun(cmd *cobra.Command, g *globals, o *statusOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	ctx := cmd.Context()
	e, err := g.open(ctx, &o.src, false)
	if err != nil {
		return err
	}
	defer e.Close()
	e.env.Verify = o.verify
	doc := observeStatus(ctx, e, g.concurrency)
	if o.output == "json" {
		enc := json.NewEncoder(io.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			return err
		}
	} else if err := statusText(io, doc); err != nil {
		return err
	}
	if doc.converged() {
		return nil
	}
	return &exitError{code: exitFailure}
}

// observeStatus judges every resource the way diff does: against the
// source when one is given, else against what was last applied (recalled
// from the snapshot).
func observeStatus(ctx context.Context, e *engine, concurrency int) statusDoc {
	doc := statusDoc{StateDir: e.state.Path, Source: e.snap.Source, Revision: e.snap.Revision, LastAttempt: e.snap.LastAttempt, Resources: []resourceStatus{}}
	if !e.snap.LastSyncTime.IsZero() {
		doc.LastSyncTime = &e.snap.LastSyncTime
	}
	host := driver.Host{Env: e.env}
	set := e.set
	snap := e.snap
	var unknown []*diff.Change
	if set == nil {
		set, snap, unknown = host.RecallAll(e.snap)
		e.env.Set = set
	}
	plan := diff.Make(ctx, host, set, snap, concurrency)
	seen := map[string]bool{}
	for _, c := range append(plan.Changes, unknown...) {
		r := fromChange(c)
		if f := e.snap.LastAttempt.FailureOf(r.ID); f != nil && (r.LastApplied == nil || r.LastApplied.Error == "") {
			r.Health = health.Worst(r.Health, health.Degraded)
			r.Reason = strings.TrimPrefix(r.Reason+"; last sync failed: "+f.Error, "; ")
		}
		seen[r.ID] = true
		doc.Resources = append(doc.Resources, r)
	}
	// Failed before it was ever applied, and not in the source given (or
	// no source): still shown, with its error.
	if a := e.snap.LastAttempt; a != nil {
		for _, f := range a.Failed {
			if !seen[f.ID] {
				doc.Resources = append(doc.Resources, resourceStatus{ID: f.ID, Kind: f.Kind, Path: f.Path, Sync: health.OutOfSync, Health: health.Missing, Reason: "never applied; last sync failed: " + f.Error})
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

// converged is what status's exit code says: synced, and nothing missing,
// degraded or unknown.
func (d statusDoc) converged() bool {
	return d.Sync == health.Synced && (d.Health == health.Healthy || d.Health == health.Progressing || d.Health == health.Suspended)
}

// fromChange turns a planned change into a resource's status.
func fromChange(c *diff.Change) resourceStatus {
	r := resourceStatus{ID: string(c.ID), Kind: c.Kind, Path: c.Path, Sync: c.Status(), Health: c.Health, Runtime: c.Runtime}
	if c.Record != nil {
		r.LastApplied = c.Record.Result
	}
	switch {
	case c.Error != "":
		r.Health, r.Reason = health.Unknown, c.Error
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
			r.Reason = fmt.Sprintf("%s (%d files drifted)", r.Reason, c.Drifted)
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

func statusText(io streams, doc statusDoc) error {
	var b strings.Builder
	if doc.LastSyncTime == nil && len(doc.Resources) == 0 {
		fmt.Fprintf(&b, "Never synced here: the state dir %s holds no snapshot.\nRun cortex-sync sync with --dir or --repo (and the same --state-dir).\n", doc.StateDir)
		_, err := fmt.Fprint(io.Out, b.String())
		return err
	}
	src := "(never synced)"
	if doc.Source.URL != "" {
		src = fmt.Sprintf("%s %s (path %s)", doc.Source.Type, doc.Source.URL, orDot(doc.Source.Path))
	}
	fmt.Fprintf(&b, "State dir:  %s\nSource:     %s\n", doc.StateDir, src)
	if doc.Revision != "" {
		fmt.Fprintf(&b, "Revision:   %s\n", doc.Revision)
	}
	last := "never"
	if doc.LastSyncTime != nil {
		last = fmt.Sprintf("%s (%s ago)", doc.LastSyncTime.Format(time.RFC3339), time.Since(*doc.LastSyncTime).Round(time.Second))
	}
	fmt.Fprintf(&b, "Last sync:  %s\n", last)
	if a := doc.LastAttempt; a != nil && len(a.Failed) > 0 {
		rev := ""
		if a.Revision != "" {
			rev = " of " + a.Revision
		}
		fmt.Fprintf(&b, "Attempt:    the last sync%s failed: %s did not apply\n", rev, countOf(len(a.Failed), "resource"))
	}
	fmt.Fprintf(&b, "Sync:       %s\nHealth:     %s\n", doc.Sync, doc.Health)
	if len(doc.Resources) > 0 {
		b.WriteString("\n")
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RESOURCE\tSYNC\tHEALTH\tREASON")
		for _, r := range doc.Resources {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Sync, r.Health, oneLine(r.Reason))
		}
		tw.Flush()
	}
	_, err := fmt.Fprint(io.Out, b.String())
	return err
}

// oneLine keeps a table row on one line: output tails hold newlines.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// countOf counts in words: "1 resource", "3 resources".
func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}
