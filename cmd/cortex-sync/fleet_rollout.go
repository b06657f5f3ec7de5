package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/fleet"
)

type fleetRolloutOptions struct {
	etcd     etcdFlags
	output   string
	revision string
	reason   string
}

func newFleetRolloutCmd(g *globals, io streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Show, pause, resume or abort the rollout of a revision",
		Long: `A rollout admits hosts to a new revision in waves (fleet.yaml's rollout:).
These commands act on the newest rollout, or on --revision.`,
		Example: `  cortex-sync fleet rollout status --fleet prod --etcd-endpoints https://etcd1:2379
  cortex-sync fleet rollout pause --fleet prod --etcd-endpoints https://etcd1:2379 --reason "error rate up"`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(
		newRolloutVerbCmd(g, io, "status", "Show the rollouts: state, applying, good, bad and stalled hosts", ""),
		newRolloutVerbCmd(g, io, "pause", "Pause a rollout: no host takes a new slot until resume", fleet.StatePaused),
		newRolloutVerbCmd(g, io, "resume", "Resume a paused rollout; the failures so far no longer count", fleet.StateActive),
		newRolloutVerbCmd(g, io, "abort", "Abort a rollout for good: no more hosts apply its revision", fleet.StateAborted),
		newOverrideWindowCmd(g, io),
	)
	return cmd
}

var rolloutLong = map[string]string{
	"status": `status lists the fleet's rollouts, oldest first: the revision, its state
(canary, progressing, complete, paused or aborted, and why), and the hosts applying
it, good on it, bad on it and stalled (holding a slot past progressDeadline).

Rollouts older than the newest three that are over are folded into a
summary (docs/fleet.md, "How long records live"): status counts them, and
--revision of one shows its summary (state, counts, the first bad hosts
with why, when and by whom).`,
	"pause": `pause stops the rollout of a revision (the newest by default): hosts that
hold a slot finish; no host takes a new one until resume. A newer revision
starts its own rollout, not paused.`,
	"resume": `resume lets a paused rollout go on, whether it was paused by hand or by
failures (the failure threshold, or a canary's failure): the failures so far
are forgiven and no longer count against maxUnavailable or the threshold.
The hosts that failed stay on their last good revision.

resume never says it moved a rollout it cannot move: one that is not paused
or aborted and has no failure to forgive (progressing, or complete), or one
whose recorded spec was
written by a newer cortex-sync, exits 1 saying why. A recorded spec that
does not pass (fleet status lists it under Ignored) is removed by the
resume, and the next host to take a slot records its own.`,
	"abort": `abort ends the rollout of a revision for good: no more hosts apply it. Hosts
that applied it keep it; commit a revert to go back. A newer revision
starts a new rollout.`,
}

func newRolloutVerbCmd(g *globals, io streams, verb, short, state string) *cobra.Command {
	o := &fleetRolloutOptions{}
	cmd := &cobra.Command{
		Use:     verb,
		Short:   short,
		Long:    rolloutLong[verb],
		Example: fmt.Sprintf("  cortex-sync fleet rollout %s --fleet prod --etcd-endpoints https://etcd1:2379", verb),
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return fleetRolloutRun(cmd, g, o, io, verb, state)
		},
	}
	o.etcd.add(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&o.revision, "revision", "", "the rollout's revision (default: the newest rollout)")
	if verb == "status" {
		addOutputFlag(cmd, &o.output)
	} else {
		f.StringVar(&o.reason, "reason", "", "why, shown in fleet status")
	}
	return cmd
}

func fleetRolloutRun(cmd *cobra.Command, g *globals, o *fleetRolloutOptions, io streams, verb, state string) error {
	c, err := o.etcd.client(g)
	if err != nil {
		return err
	}
	defer c.Close()
	if verb != "status" {
		rev, err := c.SetRollout(cmd.Context(), o.revision, state, operator(), o.reason)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(io.Out, "rollout of %s: %s\n", rev, map[string]string{fleet.StatePaused: "paused", fleet.StateActive: "resumed", fleet.StateAborted: "aborted"}[state])
		return err
	}
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	r, err := c.Read(cmd.Context(), "")
	if err != nil {
		return err
	}
	rs := r.Rollouts
	folded := []fleet.Summary{}
	if o.revision != "" {
		rs = nil
		for _, ro := range r.Rollouts {
			if ro.Revision == o.revision {
				rs = append(rs, ro)
			}
		}
		if rs == nil {
			var fe *fleet.FoldedError
			err := c.Folded(cmd.Context(), o.revision)
			if !errors.As(err, &fe) || fe.Ignored != "" {
				if err == nil {
					err = fmt.Errorf("%w: fleet %s has no rollout of %s", fleet.ErrNoRollout, r.Fleet, o.revision)
				}
				return err
			}
			folded = append(folded, fe.Summary)
		}
	}
	// Folded rollouts are counted, and named with --revision.
	nFolded, newestFolded, err := c.FoldedCount(cmd.Context(), 3)
	if err != nil {
		return err
	}
	if o.output == "json" {
		return printJSON(io.Out, struct {
			Fleet    string                `json:"fleet"`
			Rollouts []fleet.RolloutStatus `json:"rollouts"`
			Folded   []fleet.Summary       `json:"folded"`
		}{r.Fleet, append([]fleet.RolloutStatus{}, rs...), folded})
	}
	var b strings.Builder
	if len(rs) == 0 && len(folded) == 0 {
		fmt.Fprintf(&b, "Fleet %s has no rollout: no revision has needed a slot yet.\n", r.Fleet)
	}
	rolloutLines(&b, rs)
	for _, s := range folded {
		summaryLines(&b, s)
	}
	if o.revision == "" && nFolded > 0 {
		short := make([]string, len(newestFolded))
		for i, rev := range newestFolded {
			short[i] = cell(shortRev(rev), narrowCell)
		}
		fmt.Fprintf(&b, "Folded:     %d older rollouts, into summaries (the newest: %s); fleet rollout status --revision REV shows one\n", nFolded, strings.Join(short, ", "))
	}
	_, err = fmt.Fprint(io.Out, b.String())
	return err
}

// summaryLines describes a folded rollout from its summary.
func summaryLines(b *strings.Builder, s fleet.Summary) {
	fmt.Fprintf(b, "Rollout of %s: folded (%s)", cell(shortRev(s.Revision), wideCell), s.State)
	if s.Why != "" {
		fmt.Fprintf(b, " (%s)", cell(s.Why, wideCell))
	}
	fmt.Fprintf(b, "\n  started %s by %s; maxUnavailable %s, canary %d, minReady %s", s.Started.Format(time.RFC3339), cell(s.StartedBy, narrowCell),
		s.Rollout.MaxUnavailable.String(), s.Rollout.Canary, s.Rollout.MinReady.Std())
	bad := make([]string, 0, len(s.BadHosts))
	for _, h := range s.BadHosts {
		if h.Why == "" {
			bad = append(bad, cell(h.Host, narrowCell))
			continue
		}
		bad = append(bad, cell(h.Host, narrowCell)+" ("+cell(h.Why, wideCell)+")")
	}
	if more := s.Bad - len(s.BadHosts); more > 0 {
		bad = append(bad, fmt.Sprintf("and %d more", more))
	}
	completed := "-"
	if !s.Completed.IsZero() {
		completed = s.Completed.Format(time.RFC3339)
	}
	fmt.Fprintf(b, "\n  completed %s; good: %d; bad: %d", completed, s.Good, s.Bad)
	if len(bad) > 0 {
		fmt.Fprintf(b, " (%s)", strings.Join(bad, ", "))
	}
	fmt.Fprintf(b, "\n  folded by %s at %s: its per-host records are deleted\n", cell(s.FoldedBy, narrowCell), s.FoldedAt.Format(time.RFC3339))
}
