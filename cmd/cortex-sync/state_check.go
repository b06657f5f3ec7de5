package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/index"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

type stateCheckOptions struct {
	output string
}

func newStateCheckCmd(g *globals, io streams) *cobra.Command {
	o := &stateCheckOptions{}
	cmd := &cobra.Command{
		Use: "check",
		Example: `  cortex-sync state check
  cortex-sync state check --state-dir /var/lib/cortex-sync -o json`,
		Short: "Verify the snapshot, its serial and the tree indexes; exit 1 on a problem",
		Long: `check reads everything cortex-sync keeps in the state dir and changes
nothing: state.json (whole, checksummed, not older than the last snapshot
written here), the tree indexes (trees/*.idx), the source stat caches
(cache/*.idx) and temp files a killed write left (one whose writer still
runs, an agent's writing now, is none). Each problem says what
'cortex-sync state repair' would do about it, or what you must do.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return stateCheckRun(g, o, io)
		},
	}
	addOutputFlag(cmd, &o.output)
	return cmd
}

func stateCheckRun(g *globals, o *stateCheckOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	findings := state.At(g.stateDir).Check(index.Check)
	docs, bad := findingDocs(findings)
	if o.output == "json" {
		if err := printJSON(io.Out, checkDoc{StateDir: g.stateDir, Problems: bad, Findings: docs}); err != nil {
			return err
		}
		findings = nil // said
	}
	for _, f := range findings {
		if f.OK {
			fmt.Fprintf(io.Out, "ok       %s: %s\n", f.File, f.What)
			continue
		}
		verb := "repair:"
		if !f.Repairable {
			verb = "to do:"
		}
		fmt.Fprintf(io.Out, "PROBLEM  %s: %s\n         %s %s\n", f.File, f.What, verb, f.Fix)
	}
	if bad > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("%s in %s", plural(bad, "problem"), g.stateDir)}
	}
	return nil
}
