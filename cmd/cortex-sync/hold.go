package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/fleet"
)

type holdOptions struct {
	etcd   etcdFlags
	reason string
	local  bool
}

func newHoldCmd(g *globals, io streams) *cobra.Command {
	o := &holdOptions{}
	cmd := &cobra.Command{
		Use:   "hold [HOST]",
		Short: "Say \"not now\" for a host: fleet rollouts pass it by until release",
		Long: `hold tells the fleet's rollouts to pass HOST (default this host, --host-name)
by: it takes no slot, so it applies no gated revision, and the others go
on without it; it keeps healing the revision it is on. release ends it, and
the host catches up under the same gates.

The hold is kept in etcd. --local writes the maintenance file in the state
dir instead (` + fleet.MaintenanceName + `), which this host's agent reads with etcd down as
well.`,
		Example: `  cortex-sync hold --reason "disk swap" --fleet prod --etcd-endpoints https://etcd1:2379
  cortex-sync hold db2 --fleet prod --etcd-endpoints https://etcd1:2379
  cortex-sync hold --local --reason "kernel upgrade"`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return holdRun(cmd, g, o, io, args)
		},
	}
	o.etcd.add(cmd.Flags())
	cmd.Flags().StringVar(&o.reason, "reason", "", "why, shown in fleet status")
	cmd.Flags().BoolVar(&o.local, "local", false, "write this host's maintenance file in the state dir instead of a hold in etcd")
	return cmd
}

func holdRun(cmd *cobra.Command, g *globals, o *holdOptions, io streams, args []string) error {
	host := hostArg(g, args)
	if o.local {
		if len(args) == 1 {
			return fmt.Errorf("--local holds this host only; run it on %s", host)
		}
		file := maintenanceFile(g)
		if err := stateDirOf(g).WriteFile(fleet.MaintenanceName, []byte(o.reason+"\n")); err != nil {
			return fmt.Errorf("write the maintenance file: %w", err)
		}
		_, err := fmt.Fprintf(io.Out, "%s: in maintenance (%s): rollouts pass it by until cortex-sync release --local\n", host, file)
		return err
	}
	c, err := o.etcd.client(g)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Hold(cmd.Context(), host, operator(), o.reason); err != nil {
		return err
	}
	_, err = fmt.Fprintf(io.Out, "%s: held in fleet %s: rollouts pass it by until cortex-sync release %s\n", host, c.Fleet(), host)
	return err
}

// hostArg is the host a hold or release names: its argument, or this host.
func hostArg(g *globals, args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	return g.host.value.Name
}

// maintenanceFile is this host's maintenance file, in the state dir.
func maintenanceFile(g *globals) string { return filepath.Join(g.stateDir, fleet.MaintenanceName) }
