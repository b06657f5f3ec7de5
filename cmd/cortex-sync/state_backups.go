package main

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

type stateBackupsOptions struct {
	output string
}

func newStateBackupsCmd(g *globals, io streams) *cobra.Command {
	o := &stateBackupsOptions{}
	cmd := &cobra.Command{
		Use: "backups",
		Example: `  cortex-sync state backups
  cortex-sync state backups -o json`,
		Short: "List the backups of what cortex-sync overwrote or deleted",
		Long: `backups lists the backup runs under the state dir's backups/, newest first:
each holds, at its in-root path, what one sync overwrote or deleted that
cortex-sync had not written itself. After every successful sync, runs
beyond --backup-keep and older than --backup-max-age are deleted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return stateBackupsRun(g, o, io)
		},
	}
	addOutputFlag(cmd, &o.output)
	return cmd
}

func stateBackupsRun(g *globals, o *stateBackupsOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	runs, err := state.At(g.stateDir).Backups()
	if err != nil {
		return err
	}
	if o.output == "json" {
		return printJSON(io.Out, backupsDoc{StateDir: g.stateDir, Backups: backupDocs(runs)})
	}
	if len(runs) == 0 {
		fmt.Fprintln(io.Out, "No backups.")
		return nil
	}
	tw := tabwriter.NewWriter(io.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tAGE\tFILES\tSIZE\tPATH")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.Name, age(time.Since(r.Time)), r.Files, size(r.Bytes), r.Path)
	}
	return errors.Join(tw.Flush())
}
