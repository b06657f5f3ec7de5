package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
)

type diffOptions struct {
	src      sourceFlags
	output   string
	exitCode bool
	verify   bool
}

func newDiffCmd(g *globals, io streams) *cobra.Command {
	o := &diffOptions{}
	cmd := &cobra.Command{
		Use:   "diff",
		Short: "Print what sync would create, update or delete, and why",
		Long: `diff plans a sync without touching the host: desired state from the source,
compared with the last applied snapshot and the live host. Each change says
why it is due: added or changed in Git, drifted or missing on the host,
removed from Git.

With --exit-code it exits 0 when the host is in sync, 1 when there are
changes or drift, and 2 on trouble, like diff(1): a drift check for CI.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := diffRun(cmd, g, o, io)
			var ee *exitError
			if o.exitCode && err != nil && !errors.As(err, &ee) {
				return &exitError{code: exitTrouble, err: err}
			}
			return err
		},
	}
	o.src.add(cmd)
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "text, json or markdown")
	cmd.Flags().BoolVar(&o.exitCode, "exit-code", false, "exit 1 when there are changes, 2 on trouble")
	cmd.Flags().BoolVar(&o.verify, "verify", false, "hash every file instead of trusting unchanged stats")
	return cmd
}

func diffRun(cmd *cobra.Command, g *globals, o *diffOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json", "markdown"); err != nil {
		return err
	}
	e, err := g.open(cmd.Context(), &o.src, true)
	if err != nil {
		return err
	}
	defer e.Close()
	e.env.Verify = o.verify
	plan := diff.Make(cmd.Context(), driver.Host{Env: e.env}, e.set, e.snap, g.concurrency)
	plan.Source, plan.Revision = e.ref, e.checkout.Revision
	if err := render(io, plan, o.output); err != nil {
		return err
	}
	if errs := plan.Errors(); len(errs) > 0 {
		return fmt.Errorf("%d resources could not be planned (see above)", len(errs))
	}
	if o.exitCode && plan.HasChanges() {
		return &exitError{code: exitChanges}
	}
	return nil
}

func render(io streams, plan *diff.Plan, output string) error {
	switch output {
	case "json":
		return diff.JSON(io.Out, plan)
	case "markdown":
		return diff.Markdown(io.Out, plan)
	}
	return diff.Text(io.Out, plan, diff.TextOptions{Color: isTerminal(io.Out)})
}

func checkOutput(got string, allowed ...string) error {
	for _, a := range allowed {
		if got == a {
			return nil
		}
	}
	return fmt.Errorf("--output %q: use one of %v", got, allowed)
}
