package main

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/fleet"
)

type releaseOptions struct {
	etcd  etcdFlags
	local bool
}

func newReleaseCmd(g *globals, io streams) *cobra.Command {
	o := &releaseOptions{}
	cmd := &cobra.Command{
		Use:   "release [HOST]",
		Short: "End a hold: the host takes part in fleet rollouts again",
		Long: `release ends cortex-sync hold for HOST (default this host, --host-name): the
next rollout step admits it under the same gates as every other host.
--local removes this host's maintenance file instead.`,
		Example: `  cortex-sync release --fleet prod --etcd-endpoints https://etcd1:2379
  cortex-sync release --local`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return releaseRun(cmd, g, o, io, args)
		},
	}
	o.etcd.add(cmd.Flags())
	cmd.Flags().BoolVar(&o.local, "local", false, "remove this host's maintenance file in the state dir instead of a hold in etcd")
	return cmd
}

func releaseRun(cmd *cobra.Command, g *globals, o *releaseOptions, io streams, args []string) error {
	host := hostArg(g, args)
	if o.local {
		_, err := stateDirOf(g).Lstat(fleet.MaintenanceName)
		if err == nil {
			err = stateDirOf(g).Remove(fleet.MaintenanceName)
		}
		if errors.Is(err, fs.ErrNotExist) {
			_, err = fmt.Fprintf(io.Out, "%s: was not in maintenance (%s)\n", host, maintenanceFile(g))
			return err
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(io.Out, "%s: maintenance over: rollouts admit it again\n", host)
		return err
	}
	c, err := o.etcd.client(g)
	if err != nil {
		return err
	}
	defer c.Close()
	was, err := c.Unhold(cmd.Context(), host)
	if err != nil {
		return err
	}
	if !was {
		_, err = fmt.Fprintf(io.Out, "%s: was not held in fleet %s\n", host, c.Fleet())
		return err
	}
	_, err = fmt.Fprintf(io.Out, "%s: released in fleet %s: rollouts admit it again\n", host, c.Fleet())
	return err
}
