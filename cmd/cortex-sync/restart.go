package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// processVerbOptions are restart's, stop's and start's: the verb, and how
// long a started process has to prove itself.
type processVerbOptions struct {
	op   driver.ProcessOp
	wait time.Duration
}

func newRestartCmd(g *globals, io streams) *cobra.Command {
	o := &processVerbOptions{op: driver.OpRestart}
	cmd := &cobra.Command{
		Use: "restart Process/NAME",
		Example: `  cortex-sync restart Process/web
  cortex-sync restart Process/web --state-dir /var/lib/cortex-sync`,
		Short: "Restart a supervised process now; also ends Failed and a hold",
		Long: `restart stops a supervised process (its stop signal, then SIGKILL after its
stop timeout, to its whole cgroup) and starts it again with the spec last
applied: a rollout restart. It also ends a Failed state, reached after too
many quick failures in a row, and a hold (cortex-sync stop). It acts on the
host directly through the state dir, with or without an agent running.

It reports what is true after the fact: it waits until the new process is
ready (with a readiness probe) or has run its minUptime, up to
--wait-timeout, and prints its health then; a process still short of that
is "started, not yet ready". It exits 1 when the process did not come up
(a crash loop, Failed).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return processVerbRun(cmd, g, o, io, resource.ID(args[0]))
		},
	}
	waitFlag(cmd, &o.wait)
	return cmd
}

// waitFlag is how long restart and start wait for the process to prove
// itself.
func waitFlag(cmd *cobra.Command, wait *time.Duration) {
	cmd.Flags().DurationVar(wait, "wait-timeout", time.Minute, "how long to wait for the process to be ready, or up for its minUptime, before reporting it")
}

// processVerbRun runs an operator's verb on a process under the state
// lock, so it never races a sync writing the same process's spec; then,
// with the lock let go, it waits for a started process to prove itself and
// reports its health.
func processVerbRun(cmd *cobra.Command, g *globals, o *processVerbOptions, io streams, id resource.ID) error {
	ctx, op := cmd.Context(), o.op
	if id.Kind() == "" || id.Name() == "" {
		return fmt.Errorf("%q: name the process as Process/NAME", id)
	}
	s, done, err := g.session(ctx, &sourceFlags{}, false, true)
	if err != nil {
		return err
	}
	rep, err := driver.ControlProcess(ctx, s.Env, id, op)
	done()
	if err != nil {
		return err
	}
	if op != driver.OpStop {
		if rep, err = driver.WaitStarted(ctx, s.Env, id, o.wait); err != nil {
			return err
		}
	}
	switch op {
	case driver.OpStop:
		_, err = fmt.Fprintf(io.Out, "%s: stopped (%s); sync leaves it stopped until cortex-sync start %s\n", id, rep.Reason, id)
	case driver.OpStart:
		_, err = fmt.Fprintf(io.Out, "%s: started: %s: %s\n", id, rep.Health, rep.Reason)
	default:
		_, err = fmt.Fprintf(io.Out, "%s: restarted: %s: %s\n", id, rep.Health, rep.Reason)
	}
	if err == nil && rep.Health == health.Degraded {
		err = &exitError{code: exitFailure, err: fmt.Errorf("%s did not come up; its output: cortex-sync logs %s", id, id)}
	}
	return err
}
