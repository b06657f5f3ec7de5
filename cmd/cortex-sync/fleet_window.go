package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

type overrideWindowOptions struct {
	etcd   etcdFlags
	reason string
}

func newOverrideWindowCmd(g *globals, io streams) *cobra.Command {
	o := &overrideWindowOptions{}
	cmd := &cobra.Command{
		Use:   "override-window REVISION",
		Short: "Let a revision in outside the hosts' deploy windows",
		Long: `override-window lets REVISION in at once on the hosts that wait for their
deploy window (fleet.yaml windows:), for a week. Each host still takes a
slot, as the rollout says; a later revision waits for its windows again.
A host asks at its next fetch (--interval), or at once when its rollout
moves.`,
		Example: `  cortex-sync fleet rollout override-window main@sha1:0123abcd... --fleet prod --etcd-endpoints https://etcd1:2379 --reason "security fix"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.etcd.client(g)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.OverrideWindow(cmd.Context(), args[0], operator(), o.reason); err != nil {
				return err
			}
			_, err = fmt.Fprintf(io.Out, "deploy windows overridden for %s: hosts take it at their next fetch\n", args[0])
			return err
		},
	}
	o.etcd.add(cmd.Flags())
	cmd.Flags().StringVar(&o.reason, "reason", "", "why, kept with the override")
	return cmd
}
