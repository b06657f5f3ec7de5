package main

import (
	"encoding/json"

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
	cmd.AddCommand(&cobra.Command{
		Use:   "export",
		Short: "Write a portable snapshot (source, applied revision, inventory) to stdout",
		Long: `export writes the snapshot as JSON: where desired state came from, the
revision last applied, and the inventory, with the host's facts a plan
needs that no sandbox has (hostFacts: whether each command's creates
exists). In CI, diff --against this file plans a pull request against what
the host runs, without touching the host:

  cortex-sync state export > host.json                      # on the host
  cortex-sync diff --repo URL --branch pr-branch --against host.json   # in CI`,
		Example: `  cortex-sync state export > host.json
  cortex-sync state export --state-dir /var/lib/cortex-sync | jq .revision`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, done, err := g.stateSession(cmd, false)
			if err != nil {
				return err
			}
			defer done()
			snap := s.View()
			snap.Root = "" // where it lives on this host is no one else's business
			enc := json.NewEncoder(io.Out)
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				*state.Snapshot
				hostFacts
			}{snap, hostFacts{HostFacts: &reconcile.HostFacts{Exists: s.Exists()}}})
		},
	})
	cmd.AddCommand(newStateCheckCmd(g, io), newStateRepairCmd(g, io), newStateBackupsCmd(g, io), newStateAcceptRollbackCmd(g, io))
	return cmd
}

// hostFacts is what state export adds to the snapshot: the facts of the
// host a plan against it (diff --against) needs.
type hostFacts struct {
	HostFacts *reconcile.HostFacts `json:"hostFacts,omitempty"`
}

// stateSession opens the state dir for a state command: under the root
// the snapshot was applied under, unless --root says otherwise.
func (g *globals) stateSession(cmd *cobra.Command, write bool) (*reconcile.Session, func(), error) {
	if snap, err := (state.Dir{Path: g.stateDir}).Load(); err == nil && snap.Root != "" && !cmd.Flags().Changed("root") {
		eg := *g
		eg.root = snap.Root
		g = &eg
	}
	return g.session(cmd.Context(), &sourceFlags{}, false, write)
}
