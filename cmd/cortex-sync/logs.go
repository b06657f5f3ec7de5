package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

type logsOptions struct {
	follow bool
	tail   int
}

func newLogsCmd(g *globals, io streams) *cobra.Command {
	o := &logsOptions{}
	cmd := &cobra.Command{
		Use: "logs Process/NAME | Command/NAME",
		Example: `  cortex-sync logs Process/web --tail 50
  cortex-sync logs Process/web -f
  cortex-sync logs Command/migrate`,
		Short: "Print the output of a supervised process or a command",
		Long: `logs prints what a supervised process wrote (and what its supervisor said
about it, timestamped) or what a command's runs wrote, from the state dir.
--tail limits it to the last lines; -f follows it as it grows, until
interrupted. No agent is needed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return logsRun(cmd, g, o, io, resource.ID(args[0]))
		},
	}
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep printing what is appended")
	cmd.Flags().IntVar(&o.tail, "tail", -1, "print only the last N lines (-1: all)")
	return cmd
}

func logsRun(cmd *cobra.Command, g *globals, o *logsOptions, io streams, id resource.ID) error {
	file, err := driver.LogFile(g.stateDir, id)
	if err != nil {
		return err
	}
	// Logs are capped (10 MiB), so reading one whole is fine.
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s has no log in %s: it never ran here, or was pruned", id, g.stateDir)
	}
	if err != nil {
		return err
	}
	if _, err := io.Out.Write(lastLines(b, o.tail)); err != nil {
		return err
	}
	if !o.follow {
		return nil
	}
	return supervise.Follow(cmd.Context(), file, int64(len(b)), io.Out)
}

// lastLines is the end of b holding its last n lines (all of it for n < 0).
func lastLines(b []byte, n int) []byte {
	if n < 0 {
		return b
	}
	if n == 0 {
		return nil
	}
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if b[i] == '\n' {
			if n--; n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}
