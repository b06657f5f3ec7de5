package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/fleet"
)

type fleetStatusOptions struct {
	etcd     etcdFlags
	output   string
	revision string
}

func newFleetStatusCmd(g *globals, io streams) *cobra.Command {
	o := &fleetStatusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every host of the fleet: revision, sync, health, rollout phase",
		Long: `status reads the fleet from etcd, from any machine that reaches it: one row
per host (the revision it is on, sync, health, whether it is on its last
good revision, its phase in the rollout, when it last wrote), stale when its
presence lease has expired (its agent is down or cut off); a summary per
revision; and the rollouts.

The head is the newest revision a live host has fetched (by commit time),
or --revision.

Exit codes: 0 when every live host is Synced and Healthy on the head, 1
otherwise, 2 when etcd cannot be read.`,
		Example: `  cortex-sync fleet status --etcd-endpoints https://etcd1:2379,https://etcd2:2379,https://etcd3:2379 --fleet prod
  cortex-sync fleet status --config /etc/cortex-sync/agent.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := fleetStatusRun(cmd, g, o, io)
			var ee *exitError
			if err != nil && !errors.As(err, &ee) {
				return &exitError{code: exitTrouble, err: err}
			}
			return err
		},
	}
	o.etcd.add(cmd.Flags())
	addOutputFlag(cmd, &o.output)
	cmd.Flags().StringVar(&o.revision, "revision", "", "the revision every live host should be on (default: the newest any live host fetched)")
	return cmd
}

func fleetStatusRun(cmd *cobra.Command, g *globals, o *fleetStatusOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	c, err := o.etcd.client(g)
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := c.Read(cmd.Context(), o.revision)
	if err != nil {
		return err
	}
	if o.output == "json" {
		err = printJSON(io.Out, r)
	} else {
		err = fleetStatusText(io, r)
	}
	if err != nil {
		return err
	}
	if !r.Converged {
		return &exitError{code: exitFailure}
	}
	return nil
}

func fleetStatusText(io streams, r *fleet.Report) error {
	var b strings.Builder
	head := r.Head
	if head == "" {
		head = "unknown (no live host reported one)"
	}
	fmt.Fprintf(&b, "Fleet:      %s\nHead:       %s\n", r.Fleet, cell(head, wideCell))
	state := "converged: every live host is Synced and Healthy on the head"
	if !r.Converged {
		state = "not converged"
	}
	fmt.Fprintf(&b, "State:      %s\n", state)
	if len(r.Hosts) == 0 {
		b.WriteString("\nNo host has joined this fleet yet (agents with --etcd-endpoints and --fleet " + r.Fleet + ").\n")
		_, err := fmt.Fprint(io.Out, b.String())
		return err
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tREVISION\tSYNC\tHEALTH\tLAST GOOD\tROLLOUT\tLAST SEEN\tNOTE")
	now := time.Now()
	for _, h := range r.Hosts {
		seen := "-"
		if !h.Time.IsZero() {
			seen = seenAgo(now.Sub(h.Time))
		}
		lastGood := "-"
		switch {
		case h.OnLastGood && h.BehindHead:
			lastGood = "yes, behind head"
		case h.OnLastGood:
			lastGood = "yes"
		case h.LastGood != "":
			lastGood = shortRev(h.LastGood)
		}
		var note []string
		if h.Stale {
			note = append(note, "stale: presence lease expired")
		}
		if h.Held != "" {
			note = append(note, "held "+cell(h.Held, wideCell))
		}
		if !h.WindowOpens.IsZero() && !h.Stale {
			note = append(note, "waits for its deploy window: opens "+h.WindowOpens.UTC().Format(time.RFC3339))
		}
		if len(h.Fighting) > 0 {
			note = append(note, "fighting: "+cellList(h.Fighting, 5))
		}
		if h.LastError != "" {
			note = append(note, cell(h.LastError, wideCell))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(h.Host, narrowCell), cell(orDash(shortRev(h.Revision)), narrowCell),
			cell(orDash(h.Sync), narrowCell), cell(orDash(h.Health), narrowCell), cell(lastGood, narrowCell), cell(orDash(h.Phase), narrowCell), seen,
			cell(strings.Join(note, "; "), wideCell))
	}
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tLIVE\tSYNCED\tHEALTHY\tSTALE")
	for _, s := range r.Revisions {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", cell(orDash(shortRev(s.Revision)), narrowCell), s.Hosts, s.Synced, s.Healthy, s.Stale)
	}
	tw.Flush()
	if len(r.Rollouts) > 0 {
		b.WriteString("\n")
		rolloutLines(&b, r.Rollouts[len(r.Rollouts)-1:])
	}
	if len(r.Singletons) > 0 {
		b.WriteString("\n")
	}
	for _, s := range r.Singletons {
		fmt.Fprintf(&b, "Singleton %s: runs on %s; standby: %s\n", cell(s.Name, narrowCell), cell(s.Holder, narrowCell), cellList(s.Candidates, 10))
	}
	ignoredLines(&b, r.Ignored)
	_, err := fmt.Fprint(io.Out, b.String())
	return err
}

// rolloutLines describes rollouts, one paragraph each.
func rolloutLines(b *strings.Builder, rs []fleet.RolloutStatus) {
	for _, ro := range rs {
		fmt.Fprintf(b, "Rollout of %s: %s", cell(shortRev(ro.Revision), wideCell), ro.State)
		if ro.Why != "" && ro.State != fleet.StateProgressing {
			fmt.Fprintf(b, " (%s)", cell(ro.Why, wideCell))
		}
		if ro.State != fleet.StateUnknown {
			fmt.Fprintf(b, "\n  started %s by %s; maxUnavailable %s, canary %d, minReady %s", ro.Started.Format(time.RFC3339), cell(ro.StartedBy, narrowCell), ro.MaxUnavailable, ro.Canary, ro.MinReady)
		}
		fmt.Fprintf(b, "\n  applying: %s; good: %d; bad: %s; stalled: %s\n", cellList(ro.Applying, 10), len(ro.Good), cellList(ro.Bad, 10), cellList(ro.Stalled, 10))
	}
}

// seenAgo says how long ago a host wrote, to the second within a minute.
func seenAgo(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%ds ago", int(max(d, 0).Seconds()))
	}
	return age(d) + " ago"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

var fullSHA = regexp.MustCompile(`([0-9a-f]{12})[0-9a-f]{28}`)

// shortRev shortens the SHA in "main@sha1:…" to 12 digits for a table.
func shortRev(rev string) string { return fullSHA.ReplaceAllString(rev, "$1") }

// What hosts write is shown capped and cleaned: any member can write any
// key (docs/fleet.md, "Trust"), so a value may be a megabyte long or
// carry terminal escapes.
const (
	narrowCell = 48  // a name, a revision, a state
	wideCell   = 200 // a note, a reason
)

// cell is s as one cell of a table: control characters (escapes, line
// breaks) and invalid UTF-8 shown as '?', runs of space as one, at most n
// runes (the rest cut to "…").
func cell(s string, n int) string {
	if len(s) > 4*n+64 {
		s = s[:4*n+64] // enough for n runes, whatever they are
	}
	out := make([]rune, 0, min(len(s), n+1))
	space := false
	for i, r := range s {
		if _, size := utf8.DecodeRuneInString(s[i:]); r == utf8.RuneError && size == 1 {
			r = '?'
		}
		switch {
		case unicode.IsSpace(r):
			space = len(out) > 0
			continue
		case !unicode.IsPrint(r):
			r = '?'
		}
		if space {
			out, space = append(out, ' '), false
		}
		if out = append(out, r); len(out) > n {
			return string(out[:n]) + "…"
		}
	}
	return string(out)
}

// cellList is a list of host names as one cell: each a cell, at most n.
func cellList(hosts []string, n int) string {
	if len(hosts) == 0 {
		return "none"
	}
	parts := make([]string, 0, min(len(hosts), n))
	for _, h := range hosts[:min(len(hosts), n)] {
		parts = append(parts, cell(h, narrowCell))
	}
	if len(hosts) > n {
		parts = append(parts, fmt.Sprintf("and %d more", len(hosts)-n))
	}
	return strings.Join(parts, ", ")
}

// ignoredLines says which records of the fleet's keys were ignored, and
// why: at most a few, the rest counted (fleet status -o json lists all).
func ignoredLines(b *strings.Builder, ig []fleet.Ignored) {
	if len(ig) == 0 {
		return
	}
	fmt.Fprintf(b, "\nIgnored:    %d records of the fleet's keys do not pass (any member can write any key; docs/fleet.md, \"Trust\"):\n", len(ig))
	for i, r := range ig {
		if i == 5 {
			fmt.Fprintf(b, "  and %d more (fleet status -o json lists them)\n", len(ig)-i)
			break
		}
		fmt.Fprintf(b, "  %s: %s\n", cell(r.Key, narrowCell), cell(r.Why, wideCell))
	}
}
