package main

import (
	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

func newStateCmd(g *globals, io streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Read, check and repair what cortex-sync keeps about the host",
		Example: `  # Save what this host runs, for a pull-request preview in CI
  cortex-sync state export > host.json
  cortex-sync state check
  cortex-sync state backups`,
	}
	cmd.AddCommand(newStateExportCmd(g, io), newStateCheckCmd(g, io), newStateRepairCmd(g, io), newStateBackupsCmd(g, io), newStateAcceptRollbackCmd(g, io))
	return cmd
}

// stateSession opens the state dir for a state command: under the root
// the snapshot was applied under, unless --root says otherwise.
func (g *globals) stateSession(cmd *cobra.Command, write bool) (*reconcile.Session, func(), error) {
	if snap, err := state.At(g.stateDir).Load(); err == nil && snap.Root != "" && !cmd.Flags().Changed("root") {
		eg := *g
		eg.root = snap.Root
		g = &eg
	}
	return g.session(cmd.Context(), &sourceFlags{}, false, write)
}
