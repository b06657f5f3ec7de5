package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

func newHistoryCmd(g *globals, io streams) *cobra.Command {
	output := "text"
	cmd := &cobra.Command{
		Use:   "history",
		Short: "List the revisions this host applied, and how each ended",
		Long: `history lists the revisions this host applied, oldest first, as the
snapshot records them (the last 50): the revision, its commit's subject,
when it was applied, its verdict — good (and the time from its apply to
good), bad and why, rolled back, refused, pending — and the rollbacks, by
hand or after a bad revision. It needs no source and no agent.`,
		Example: `  cortex-sync history
  cortex-sync history -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return historyRun(cmd.Context(), g, output, io)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

// historyDoc is history -o json.
type historyDoc struct {
	LastGood   *state.Known `json:"lastGood"`
	OnRollback *state.Pin   `json:"onRollback"`
	History    []historyRow `json:"history"`
}

type historyRow struct {
	state.Applied
	ToGood float64 `json:"toGood,omitempty"` // seconds from the apply to good
}

func historyRun(ctx context.Context, g *globals, output string, io streams) error {
	if err := checkOutput(output, "text", "json"); err != nil {
		return err
	}
	if err := checkRoot(g.root); err != nil {
		return err
	}
	s, err := reconcile.Open(ctx, g.engine(), nil, false)
	if err != nil {
		return err
	}
	defer s.Close()
	snap := s.View()
	doc := historyDoc{LastGood: snap.LastGood, OnRollback: snap.Pin, History: []historyRow{}}
	for _, a := range snap.History {
		doc.History = append(doc.History, historyRow{Applied: a, ToGood: a.ToGood().Seconds()})
	}
	if output == "json" {
		return printJSON(io.Out, doc)
	}
	var b strings.Builder
	if len(doc.History) == 0 {
		fmt.Fprintf(&b, "No revision recorded here yet (state dir %s): the agent, sync --wait and rollback record them.\n", g.stateDir)
		_, err := fmt.Fprint(io.Out, b.String())
		return err
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tAPPLIED\tVERDICT\tTO GOOD\tSUBJECT\tWHY")
	for _, r := range doc.History {
		toGood := "-"
		if r.Verdict == state.Good {
			toGood = r.Applied.ToGood().Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", shortRevision(r.Revision), r.AppliedAt.Local().Format(time.DateTime),
			verdictWords(&r.Applied), toGood, orDash(r.Subject), orDash(oneLine(why(&r.Applied))))
	}
	tw.Flush()
	if p := doc.OnRollback; p != nil {
		how := "rollback"
		if p.Manual {
			how = "rollback by hand"
		}
		fmt.Fprintf(&b, "\nHeld on %s by a %s while the source's head is %s: %s.\n", shortRevision(p.Revision), how, shortRevision(p.Head), heldUntil(p))
	}
	_, err = fmt.Fprint(io.Out, b.String())
	return err
}

// verdictWords says how an apply ended: good, bad, rolled back, refused.
func verdictWords(a *state.Applied) string {
	if a.RollbackFrom != "" {
		if a.Manual {
			return "rollback by hand"
		}
		return "rollback"
	}
	words := []string{string(a.Verdict)}
	if a.Verdict == "" {
		words = []string{"applied"}
	}
	if a.RolledBackTo != "" {
		words = append(words, "rolled back")
	}
	if a.Refused {
		words = append(words, "refused")
	}
	return strings.Join(words, ", ")
}

// why is what the history says of an apply beyond its verdict.
func why(a *state.Applied) string {
	var parts []string
	if a.RollbackFrom != "" {
		parts = append(parts, "from "+shortRevision(a.RollbackFrom))
	}
	if a.Reason != "" {
		parts = append(parts, a.Reason)
	}
	if a.RolledBackTo != "" {
		parts = append(parts, "rolled back to "+shortRevision(a.RolledBackTo))
	}
	return strings.Join(parts, "; ")
}

// because is ": why", or nothing without a why.
func because(why string) string {
	if why == "" {
		return ""
	}
	return ": " + oneLine(why)
}

// heldUntil says what ends a rollback's hold.
func heldUntil(p *state.Pin) string {
	if p.Manual {
		return "until a newer commit, or cortex-sync resume"
	}
	return "until a newer commit, or cortex-sync retry"
}
