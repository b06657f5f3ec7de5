package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// stateRepairOptions are state repair's: it has none of its own.
type stateRepairOptions struct{}

func newStateRepairCmd(g *globals, io streams) *cobra.Command {
	o := &stateRepairOptions{}
	return &cobra.Command{
		Use:     "repair",
		Example: `  cortex-sync state repair`,
		Short:   "Rebuild what can be rebuilt in the state dir, and say what cannot",
		Long: `repair takes the state lock, deletes a damaged tree index (the next sync
re-hashes the tree and adopts what matches Git), a damaged source stat
cache and the temp files killed writes left (never one whose writer still
runs). It never resets a damaged or rolled-back snapshot: it says what to
do instead. Exit 1 when something is left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return stateRepairRun(cmd, g, o, io)
		},
	}
}

func stateRepairRun(cmd *cobra.Command, g *globals, _ *stateRepairOptions, io streams) error {
	d := state.At(g.stateDir)
	lock, err := d.Lock(cmd.Context(), g.lockTimeout)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	findings := d.Check(index.Check) // after the lock swept temp files
	done, err := d.Repair(findings)
	for _, f := range done {
		fmt.Fprintf(io.Out, "repaired %s: %s\n", f.File, f.Fix)
	}
	left := 0
	for _, f := range findings {
		if !f.OK && !f.Repairable {
			left++
			fmt.Fprintf(io.Out, "cannot repair %s: %s\n  to do: %s\n", f.File, f.What, f.Fix)
		}
	}
	if err != nil {
		return err
	}
	if left > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("%s left for you in %s", plural(left, "problem"), g.stateDir)}
	}
	if len(done) == 0 {
		fmt.Fprintln(io.Out, "Nothing to repair.")
	}
	return nil
}
