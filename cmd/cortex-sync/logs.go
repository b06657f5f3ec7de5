package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

type logsOptions struct {
	follow bool
	tail   int
	output string
}

func newLogsCmd(g *globals, io streams) *cobra.Command {
	o := &logsOptions{}
	cmd := &cobra.Command{
		Use: "logs Process/NAME | Command/NAME",
		Example: `  cortex-sync logs Process/web --tail 50
  cortex-sync logs Process/web -f
  cortex-sync logs Command/migrate

  # One JSON object a line, for jq or a log shipper
  cortex-sync logs Process/web -o json | jq -r .line`,
		Short: "Print the output of a supervised process or a command",
		Long: `logs prints what a supervised process wrote (and what its supervisor said
about it, timestamped) or what a command's runs wrote, from the state dir.
--tail limits it to the last lines; -f follows it as it grows, until
interrupted. No agent is needed. -o json writes one JSON object a line
({"resource": ID, "line": TEXT}), following too.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return logsRun(cmd, g, o, io, resource.ID(args[0]))
		},
	}
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep printing what is appended")
	cmd.Flags().IntVar(&o.tail, "tail", -1, "print only the last N lines (-1: all)")
	addOutputFlag(cmd, &o.output)
	return cmd
}

func logsRun(cmd *cobra.Command, g *globals, o *logsOptions, io streams, id resource.ID) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	file, err := driver.LogFile(g.stateDir, id)
	if err != nil {
		return err
	}
	if o.output == "text" {
		return printLog(cmd, g, o, file, io.Out, id)
	}
	lines := &jsonLines{enc: json.NewEncoder(io.Out), id: id}
	lines.enc.SetEscapeHTML(false)
	err = printLog(cmd, g, o, file, lines, id)
	if ferr := lines.flush(); err == nil {
		err = ferr
	}
	return err
}

// printLog writes the log's last lines to out, then, following, what is
// appended.
func printLog(cmd *cobra.Command, g *globals, o *logsOptions, file string, out io.Writer, id resource.ID) error {
	// Logs are capped (10 MiB), so reading one whole is fine; a symlink
	// in the state dir is refused, never read through.
	b, err := supervise.ReadLog(file)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s has no log in %s: it never ran here, or was pruned", id, g.stateDir)
	}
	if err != nil {
		return fmt.Errorf("read the log of %s: %w", id, err)
	}
	if _, err := out.Write(lastLines(b, o.tail)); err != nil {
		return err
	}
	if !o.follow {
		return nil
	}
	return supervise.Follow(cmd.Context(), file, int64(len(b)), out)
}

// logLineDoc is one line of `logs -o json`.
type logLineDoc struct {
	Resource resource.ID `json:"resource"`
	Line     string      `json:"line"`
}

// jsonLines turns the bytes of a log into one logLineDoc a line. A line
// still being written is held until its newline comes, or until flush.
type jsonLines struct {
	enc     *json.Encoder
	id      resource.ID
	partial []byte
}

func (j *jsonLines) Write(p []byte) (int, error) {
	j.partial = append(j.partial, p...)
	for {
		i := bytes.IndexByte(j.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		if err := j.emit(j.partial[:i]); err != nil {
			return 0, err
		}
		j.partial = j.partial[i+1:]
	}
}

// flush writes the last line when it has no newline.
func (j *jsonLines) flush() error {
	if len(j.partial) == 0 {
		return nil
	}
	line := j.partial
	j.partial = nil
	return j.emit(line)
}

func (j *jsonLines) emit(line []byte) error {
	return j.enc.Encode(logLineDoc{Resource: j.id, Line: string(line)})
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
