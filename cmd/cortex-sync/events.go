package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

type eventsOptions struct {
	since  string
	follow bool
	output string
}

func newEventsCmd(g *globals, io streams) *cobra.Command {
	o := &eventsOptions{}
	cmd := &cobra.Command{
		Use:   "events",
		Short: "List what the agent decided on this host: revisions, drift, fights, processes",
		Long: `events lists the events the agent wrote to the state dir's event log, oldest
first: each revision fetched, refused (and why), held, applied, judged good
or bad, rolled back; each drift corrected; fights started and ended;
processes restarted, killed by their probe, failed; the coordinator lost
and back; rollout slots and pauses; the source failing and recovered. Each
has a time, a severity (info, warning, error), a reason code that never
changes, the resource or revision, and a message. The log is bounded (two
files of 4 MiB, events.jsonl and events.1.jsonl) and holds no secret; see
docs/agent.md, Events.

It reads the state dir alone: no agent needs to run. --since keeps the
events of the last DURATION (1h) or since a TIME (2006-01-02T15:04:05Z07:00,
2006-01-02); --follow then waits for new ones, across the log's rotation,
until interrupted. -o json writes one JSON object a line (docs/plan-json.md).`,
		Example: `  cortex-sync events
  cortex-sync events --since 1h
  cortex-sync events --follow -o json | jq 'select(.severity != "info")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return eventsRun(cmd.Context(), g, o, io)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.since, "since", "", "only the events of the last DURATION (1h) or since a TIME (RFC 3339, or a date)")
	f.BoolVarP(&o.follow, "follow", "f", false, "keep printing what is appended")
	f.StringVarP(&o.output, "output", "o", "text", "text or json (one event a line)")
	return cmd
}

// eventsFollowPoll is how often events --follow looks for new events.
const eventsFollowPoll = 200 * time.Millisecond

func eventsRun(ctx context.Context, g *globals, o *eventsOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	since, err := events.ParseSince(o.since, time.Now())
	if err != nil {
		return fmt.Errorf("--since: %w", err)
	}
	dir := state.At(g.stateDir)
	poll := time.Duration(0)
	if o.follow {
		poll = eventsFollowPoll
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
		defer stop()
	}
	enc := json.NewEncoder(io.Out)
	n := 0
	err = events.Follow(ctx, dir, since, poll, func(e events.Event) error {
		n++
		if o.output == "json" {
			return enc.Encode(e)
		}
		_, err := fmt.Fprintln(io.Out, eventLine(e))
		return err
	})
	if err != nil {
		return fmt.Errorf("read the event log in %s: %w", g.stateDir, err)
	}
	if n == 0 && !o.follow && o.output == "text" {
		fmt.Fprintf(io.Err, "No events in %s%s: the agent (cortex-sync run) writes them.\n", g.stateDir, sinceWords(o.since))
	}
	return nil
}

func sinceWords(since string) string {
	if since == "" {
		return ""
	}
	return " since " + since
}

// eventLine is an event as one line of text: time, severity, reason, what
// it is about, message.
func eventLine(e events.Event) string {
	about := e.Resource
	if about == "" && e.Revision != "" {
		about = shortRevision(e.Revision)
	}
	return strings.Join([]string{e.Time.Local().Format(time.DateTime), fmt.Sprintf("%-7s", e.Severity), fmt.Sprintf("%-18s", e.Reason), orDash(about), oneLine(e.Message)}, "  ")
}
