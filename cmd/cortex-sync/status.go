package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/spf13/cobra"
)

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

It also says what the revision gate knows (docs/rollback.md): the verdict
of the revision the host is on, the last good revision, and a rollback that
holds the host on an earlier revision than its source's head.

A resource removed from Git that the last sync kept (no --prune) is
OutOfSync: the host does not match Git until it goes.

Exit codes: 0 when everything is Synced and Healthy (or Progressing or
Suspended), 1 when something is OutOfSync, Missing, Degraded or Unknown,
nothing was ever synced here, a rollback holds the host, or the revision it
is on was judged bad; 2 when status could not be determined.`,
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

func statusRun(cmd *cobra.Command, g *globals, o *statusOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	ctx := cmd.Context()
	s, done, err := g.session(ctx, &o.src, false, false)
	if err != nil {
		return err
	}
	defer done()
	s.Env.Verify = o.verify
	doc := s.Status(ctx)
	if o.output == "json" {
		if err := printJSON(io.Out, doc); err != nil {
			return err
		}
	} else if err := statusText(io, doc); err != nil {
		return err
	}
	if doc.Converged() {
		return nil
	}
	return &exitError{code: exitFailure}
}

func statusText(io streams, doc *reconcile.Status) error {
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
		fmt.Fprintf(&b, "Attempt:    the last sync%s failed: %s did not apply\n", rev, plural(len(a.Failed), "resource"))
	}
	if doc.RolledBack != "" {
		fmt.Fprintf(&b, "Rollback:   prune is refused: %s\n", doc.RolledBack)
	}
	revisionText(&b, doc)
	agentText(&b, doc.Agent)
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
	// Why a failed Command or a Degraded process failed is often in what
	// it printed last.
	for _, r := range doc.Resources {
		if r.Runtime == nil || len(r.LastOutput) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s, its last output (cortex-sync logs %s):\n", r.ID, r.ID)
		for _, l := range r.LastOutput {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	_, err := fmt.Fprint(io.Out, b.String())
	return err
}

// oneLine keeps a table row on one line: output tails hold newlines.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// agentText says what the agent running on the state dir knows beyond the
// snapshot: a refused revision, a suspend, a prune hold, fights, and what
// it holds back.
func agentText(b *strings.Builder, r *reconcile.AgentReport) {
	if r == nil {
		return
	}
	state := "running"
	if r.Suspended {
		state = "suspended: observes and reports, changes nothing"
	}
	fmt.Fprintf(b, "Agent:      %s (pid %d, since %s)\n", state, r.Agent.PID, r.Since.Format(time.RFC3339))
	if f := r.Fleet; f != nil {
		name, how := f.Fleet, "coordinator reachable"
		if name == "" {
			name = "(not known yet)"
		}
		if f.Coordinator != "" {
			how = oneLine(f.Coordinator)
		} else if f.Slow != "" {
			how = oneLine(f.Slow)
		}
		fmt.Fprintf(b, "Fleet:      %s, as host %s; %s\n", name, f.Host, how)
		for _, ig := range f.Ignored {
			fmt.Fprintf(b, "Fleet key:  ignored %s\n", cell(ig, wideCell))
		}
		for _, n := range slices.Sorted(maps.Keys(f.Singletons)) {
			switch h := f.Singletons[n]; h {
			case f.Host:
				fmt.Fprintf(b, "Singleton:  %s runs here: this host holds it\n", n)
			case "":
				fmt.Fprintf(b, "Singleton:  %s: no host holds it now\n", n)
			default:
				fmt.Fprintf(b, "Singleton:  %s runs on %s; standby here\n", n, h)
			}
		}
	}
	if f := r.Refused; f != nil {
		fmt.Fprintf(b, "Refused:    revision %s, since %s; the host stays on %s: %s\n", shortRevision(f.Revision), f.Since.Format(time.RFC3339), shortRevision(r.Revision), oneLine(f.Error))
	}
	if h := r.HeldBack; h != nil && h.Reason == reconcile.ReasonWindow {
		fmt.Fprintf(b, "Window:     waiting for its deploy window: revision %s waits until %s; the host stays on %s, healing it\n",
			shortRevision(h.Revision), h.WindowOpens.Format(time.RFC3339), orDash(shortRevision(r.Revision)))
	} else if h != nil {
		fmt.Fprintf(b, "Held back:  revision %s, since %s: %s\n", shortRevision(h.Revision), h.Since.Format(time.RFC3339), oneLine(h.Error))
	}
	if r.SourceError != "" {
		fmt.Fprintf(b, "Source:     failing: %s\n", oneLine(r.SourceError))
	}
	if r.PruneHold != "" {
		fmt.Fprintf(b, "Prune:      held: %s\n", oneLine(r.PruneHold))
	}
	for _, f := range r.Fighting {
		fmt.Fprintf(b, "Fighting:   %s: corrected %d times in the fight window; corrected again once left alone\n", f.ID, f.Corrections)
	}
	for _, h := range r.Held {
		until := ""
		if !h.Until.IsZero() {
			until = " until " + h.Until.Format(time.RFC3339)
		}
		label := strings.ToUpper(h.Verdict[:1]) + h.Verdict[1:] + ":"
		if h.Verdict == "notCorrected" {
			label = "Not corrected:"
		}
		fmt.Fprintf(b, "%-11s %s%s: %s\n", label, h.ID, until, oneLine(h.Reason))
	}
	for _, h := range r.Unobserved {
		fmt.Fprintf(b, "Unobserved: %s: %s\n", h.ID, oneLine(h.Reason))
	}
	if w := r.Watches; w != nil && w.Condition != "" {
		fmt.Fprintf(b, "Watches:    %s\n", oneLine(w.Condition))
	}
}

// revisionText says what the revision gate knows: the verdict of the
// revision the host is on, the last good one, and a rollback that holds
// the host.
func revisionText(b *strings.Builder, doc *reconcile.Status) {
	if v := doc.Verdict; v != nil {
		switch v.Verdict {
		case state.Good:
			fmt.Fprintf(b, "Verdict:    good, %s after its apply (%s)\n", v.ToGood().Round(100*time.Millisecond), shortRevision(v.Revision))
		case state.Bad:
			fmt.Fprintf(b, "Verdict:    bad: %s (%s)\n", oneLine(v.Reason), shortRevision(v.Revision))
		default:
			fmt.Fprintf(b, "Verdict:    %s: %s on trial since %s\n", v.Verdict, shortRevision(v.Revision), v.AppliedAt.Format(time.RFC3339))
		}
	}
	if g := doc.LastGood; g != nil {
		fmt.Fprintf(b, "Last good:  %s (since %s)\n", shortRevision(g.Revision), g.Time.Format(time.RFC3339))
	}
	if p := doc.OnRollback; p != nil {
		how, which := "rollback", ""
		if p.Manual {
			how = "rollback by hand"
		}
		if g := doc.LastGood; g != nil && g.Revision == p.Revision {
			which = " (the last good revision)"
		}
		fmt.Fprintf(b, "Held on:    %s%s by a %s while the source's head is %s, %s%s\n", shortRevision(p.Revision), which, how, shortRevision(p.Head), heldUntil(p), because(p.Reason))
	}
}

// shortRevision shortens a revision's SHA to 12 digits: main@sha1:4b825dc642cb.
func shortRevision(rev string) string {
	if name, sha, ok := strings.Cut(rev, "@sha1:"); ok && len(sha) > 12 {
		return name + "@sha1:" + sha[:12]
	}
	if rev == "" {
		return "the revision it has"
	}
	return rev
}
