package main

import (
	"encoding/json"
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
Missing, Suspended, Unknown). It needs no source; given one (--dir), it also
compares with the desired state.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return statusRun(cmd, g, o, io)
		},
	}
	o.src.add(cmd)
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "text or json")
	cmd.Flags().BoolVar(&o.verify, "verify", false, "hash every file instead of trusting unchanged stats")
	return cmd
}

// statusDoc is status -o json and /api/v1/status.
type statusDoc struct {
	Source       state.Source     `json:"source"`
	Revision     string           `json:"revision"`
	LastSyncTime *time.Time       `json:"lastSyncTime"`
	Sync         health.Sync      `json:"sync"`
	Health       health.Status    `json:"health"`
	Resources    []resourceStatus `json:"resources"`
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
}

func statusRun(cmd *cobra.Command, g *globals, o *statusOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	e, err := g.open(cmd.Context(), &o.src, false)
	if err != nil {
		return err
	}
	defer e.Close()
	e.env.Verify = o.verify
	doc := statusDoc{Source: e.snap.Source, Revision: e.snap.Revision, Resources: []resourceStatus{}}
	if !e.snap.LastSyncTime.IsZero() {
		doc.LastSyncTime = &e.snap.LastSyncTime
	}
	host := driver.Host{Env: e.env}
	if e.set != nil {
		plan := diff.Make(cmd.Context(), host, e.set, e.snap, g.concurrency)
		for _, c := range plan.Changes {
			doc.Resources = append(doc.Resources, fromChange(c))
		}
	} else {
		for _, rec := range e.snap.Inventory {
			r := host.Observe(cmd.Context(), rec)
			doc.Resources = append(doc.Resources, resourceStatus{
				ID: rec.ID, Kind: rec.Kind, Path: rec.Path, Sync: r.Sync, Health: r.Health, Reason: r.Reason, LastApplied: rec.Result,
			})
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
	if e.snap.LastSyncTime.IsZero() && len(doc.Resources) == 0 {
		doc.Health = health.Unknown
	}
	if o.output == "json" {
		enc := json.NewEncoder(io.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	return statusText(io, doc)
}

// fromChange turns a planned change into a resource's status.
func fromChange(c *diff.Change) resourceStatus {
	r := resourceStatus{ID: string(c.ID), Kind: c.Kind, Path: c.Path, Sync: health.Synced, Health: c.Health}
	if c.Record != nil {
		r.LastApplied = c.Record.Result
	}
	if r.Health == "" {
		r.Health = health.Healthy
	}
	switch {
	case c.Error != "":
		r.Sync, r.Health, r.Reason = health.OutOfSync, health.Unknown, c.Error
	case c.Suspended:
		r.Health = health.Suspended
		if c.Action != diff.NoOp {
			r.Sync, r.Reason = health.OutOfSync, "reconcile disabled; "+c.Reason.Phrase()
		}
	case c.Action != diff.NoOp:
		r.Sync, r.Reason = health.OutOfSync, c.Reason.Phrase()
		if c.Drifted > 0 {
			r.Reason = fmt.Sprintf("%s (%d files drifted)", r.Reason, c.Drifted)
		}
	}
	if c.Detail != "" {
		r.Reason = strings.TrimPrefix(r.Reason+": "+c.Detail, ": ")
	}
	return r
}

func statusText(io streams, doc statusDoc) error {
	var b strings.Builder
	src := "(never synced)"
	if doc.Source.URL != "" {
		src = fmt.Sprintf("%s %s (path %s)", doc.Source.Type, doc.Source.URL, orDot(doc.Source.Path))
	}
	fmt.Fprintf(&b, "Source:     %s\n", src)
	if doc.Revision != "" {
		fmt.Fprintf(&b, "Revision:   %s\n", doc.Revision)
	}
	last := "never"
	if doc.LastSyncTime != nil {
		last = fmt.Sprintf("%s (%s ago)", doc.LastSyncTime.Format(time.RFC3339), time.Since(*doc.LastSyncTime).Round(time.Second))
	}
	fmt.Fprintf(&b, "Last sync:  %s\nSync:       %s\nHealth:     %s\n", last, doc.Sync, doc.Health)
	if len(doc.Resources) > 0 {
		b.WriteString("\n")
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RESOURCE\tSYNC\tHEALTH\tREASON")
		for _, r := range doc.Resources {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Sync, r.Health, r.Reason)
		}
		tw.Flush()
	}
	_, err := fmt.Fprint(io.Out, b.String())
	return err
}

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}
