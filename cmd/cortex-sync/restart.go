package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

func newRestartCmd(g *globals, io streams) *cobra.Command {
	return &cobra.Command{
		Use: "restart Process/NAME",
		Example: `  cortex-sync restart Process/web
  cortex-sync restart Process/web --state-dir /var/lib/cortex-sync`,
		Short: "Restart a supervised process now; also ends Failed and a hold",
		Long: `restart stops a supervised process (its stop signal, then SIGKILL after its
stop timeout, to its whole cgroup) and starts it again with the spec last
applied: a rollout restart. It also ends a Failed state, reached after too
many quick failures in a row, and a hold (cortex-sync stop). It acts on the
host directly through the state dir, with or without an agent running.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return processVerb(cmd, g, io, resource.ID(args[0]), driver.OpRestart)
		},
	}
}

// processVerb runs an operator's verb on a process under the state lock,
// so it never races a sync writing the same process's spec.
func processVerb(cmd *cobra.Command, g *globals, io streams, id resource.ID, op driver.ProcessOp) error {
	ctx := cmd.Context()
	if id.Kind() == "" || id.Name() == "" {
		return fmt.Errorf("%q: name the process as Process/NAME", id)
	}
	s, done, err := g.session(ctx, &sourceFlags{}, false, true)
	if err != nil {
		return err
	}
	defer done()
	rep, err := driver.ControlProcess(ctx, s.Env, id, op)
	if err != nil {
		return err
	}
	switch op {
	case driver.OpStop:
		_, err = fmt.Fprintf(io.Out, "%s: stopped; sync leaves it stopped until cortex-sync start %s\n", id, id)
	case driver.OpStart:
		_, err = fmt.Fprintf(io.Out, "%s: started: %s: %s\n", id, rep.Health, rep.Reason)
	default:
		_, err = fmt.Fprintf(io.Out, "%s: restarted: %s: %s\n", id, rep.Health, rep.Reason)
	}
	return err
}
