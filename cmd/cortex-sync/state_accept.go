package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// stateAcceptRollbackOptions are state accept-rollback's: it has none of
// its own.
type stateAcceptRollbackOptions struct{}

func newStateAcceptRollbackCmd(g *globals, io streams) *cobra.Command {
	o := &stateAcceptRollbackOptions{}
	return &cobra.Command{
		Use:     "accept-rollback",
		Example: `  cortex-sync state accept-rollback   # after restoring state.json from a backup, on purpose`,
		Short:   "Trust a snapshot older than the last one this state dir wrote",
		Long: `When state.json is older than the last snapshot cortex-sync wrote here (a
backup put back, a state dir copied in), its inventory may name files that
cortex-sync no longer owns, and sync --prune refuses to run. Check the
inventory (cortex-sync state export), then accept it: from then on prune
trusts it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return stateAcceptRollbackRun(cmd, g, o, io)
		},
	}
}

func stateAcceptRollbackRun(cmd *cobra.Command, g *globals, _ *stateAcceptRollbackOptions, io streams) error {
	s, done, err := g.stateSession(cmd, true)
	if err != nil {
		return err
	}
	defer done()
	snap := s.Snapshot()
	if snap.Rollback() == nil {
		fmt.Fprintln(io.Out, "The snapshot is the last one written here: nothing to accept.")
		return nil
	}
	if err := s.Writer().AcceptRollback(); err != nil {
		return err
	}
	fmt.Fprintf(io.Out, "Accepted: state.json (lineage %s, now serial %d, %s) is the current snapshot.\n", snap.Lineage, snap.Serial, plural(len(snap.Inventory), "resource"))
	return nil
}
