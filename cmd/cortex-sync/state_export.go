package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// stateExportOptions are state export's: it has none of its own.
type stateExportOptions struct{}

func newStateExportCmd(g *globals, io streams) *cobra.Command {
	o := &stateExportOptions{}
	return &cobra.Command{
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
			return stateExportRun(cmd, g, o, io)
		},
	}
}

func stateExportRun(cmd *cobra.Command, g *globals, _ *stateExportOptions, io streams) error {
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
}

// hostFacts is what state export adds to the snapshot: the facts of the
// host a plan against it (diff --against) needs.
type hostFacts struct {
	HostFacts *reconcile.HostFacts `json:"hostFacts,omitempty"`
}
