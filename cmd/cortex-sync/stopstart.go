package main

import (
	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

func newStopCmd(g *globals, io streams) *cobra.Command {
	o := &processVerbOptions{op: driver.OpStop}
	return &cobra.Command{
		Use:     "stop Process/NAME",
		Example: `  cortex-sync stop Process/web    # held stopped, shown Suspended, until start`,
		Short:   "Stop a supervised process and hold it stopped until start",
		Long: `stop stops a supervised process (its stop signal, then SIGKILL after its stop
timeout) and holds it stopped: sync and the agent leave it so, and status
shows it Suspended, until cortex-sync start. It acts on the host directly
through the state dir, with or without an agent running.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return processVerbRun(cmd, g, o, io, resource.ID(args[0]))
		},
	}
}

func newStartCmd(g *globals, io streams) *cobra.Command {
	o := &processVerbOptions{op: driver.OpStart}
	cmd := &cobra.Command{
		Use:     "start Process/NAME",
		Example: `  cortex-sync start Process/web`,
		Short:   "End the hold of cortex-sync stop: start the process again",
		Long: `start ends the hold that cortex-sync stop put on a supervised process and
starts it with the spec last applied; a Failed process starts again too.
Like restart, it waits until the process is ready or has run its
minUptime (up to --wait-timeout), reports its health then, and exits 1
when it did not come up.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return processVerbRun(cmd, g, o, io, resource.ID(args[0]))
		},
	}
	waitFlag(cmd, &o.wait)
	return cmd
}
