package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

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
	cmd.AddCommand(&cobra.Command{
		Use:   "export",
		Short: "Write a portable snapshot (source, applied revision, inventory) to stdout",
		Long: `export writes the snapshot as JSON: where desired state came from, the
revision last applied, and the inventory. In CI, diff --against this file
plans a pull request against what the host runs, without touching the host:

  cortex-sync state export > host.json                      # on the host
  cortex-sync diff --repo URL --branch pr-branch --against host.json   # in CI`,
		Example: `  cortex-sync state export > host.json
  cortex-sync state export --state-dir /var/lib/cortex-sync | jq .revision`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			snap, err := state.At(g.stateDir).Load()
			if err != nil {
				return err
			}
			snap.Root = "" // where it lives on this host is no one else's business
			enc := json.NewEncoder(io.Out)
			enc.SetIndent("", "  ")
			return enc.Encode(snap)
		},
	})
	cmd.AddCommand(newStateCheckCmd(g, io), newStateRepairCmd(g, io), newStateBackupsCmd(g, io), newStateAcceptRollbackCmd(g, io))
	return cmd
}
