package main

import (
	"fmt"
	"strings"

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
it, good on it, bad on it and stalled (holding a slot past progressDeadline).`,
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
	if o.revision != "" {
		rs = nil
		for _, ro := range r.Rollouts {
			if ro.Revision == o.revision {
				rs = append(rs, ro)
			}
		}
		if rs == nil {
			return fmt.Errorf("%w: fleet %s has no rollout of %s", fleet.ErrNoRollout, r.Fleet, o.revision)
		}
	}
	if o.output == "json" {
		return printJSON(io.Out, struct {
			Fleet    string                `json:"fleet"`
			Rollouts []fleet.RolloutStatus `json:"rollouts"`
		}{r.Fleet, append([]fleet.RolloutStatus{}, rs...)})
	}
	var b strings.Builder
	if len(rs) == 0 {
		fmt.Fprintf(&b, "Fleet %s has no rollout: no revision has needed a slot yet.\n", r.Fleet)
	}
	rolloutLines(&b, rs)
	_, err = fmt.Fprint(io.Out, b.String())
	return err
}
