package main

import (
	"github.com/spf13/cobra"
)

func newFleetCmd(g *globals, io streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Work with a fleet of hosts: targeting from fleet.yaml, status and rollouts in etcd",
		Long: `A fleet is many hosts served by one repository: fleet.yaml at its top says
which folders each host runs (by host name and labels), and how a new
revision rolls out. The hosts coordinate through etcd: each is present on a
lease and writes its status there, and a rollout admits hosts in waves.
See docs/fleet.md.`,
		Example: `  cortex-sync fleet targets --dir ./infra --host-name db1
  cortex-sync fleet status --etcd-endpoints https://etcd1:2379 --fleet prod
  cortex-sync fleet rollout pause --etcd-endpoints https://etcd1:2379 --fleet prod`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(
		newFleetTargetsCmd(g, io),
		newFleetStatusCmd(g, io),
		newFleetRolloutCmd(g, io),
	)
	return cmd
}
