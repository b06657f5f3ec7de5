package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/explain"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

type explainOptions struct {
	output string
}

func newExplainCmd(g *globals, io streams) *cobra.Command {
	o := &explainOptions{}
	cmd := &cobra.Command{
		Use:   "explain PATH",
		Short: "Say which manifest line and which commit manage a host path, and what happened to it",
		Long: `explain says what cortex-sync knows of a host path (absolute, below
--root): the resource that manages it, or the mirrored Directory it is an
entry of; the manifest file and line that declare it and the commit (and
author) that last changed that file, and the file its content comes
from; when it was applied here and how (the last apply's action, and the
revision the host was on); the backups of what cortex-sync overwrote or
deleted there; what it depends on, what depends on it and what a change
to it restarts or runs again (restartOn, refreshOn). For a path nothing
manages, it names the nearest managed directory above it and says
whether a sync (purge) or a prune would delete it.

It reads the snapshot and the Git cache of the state dir alone: no
fetch, no network, no state lock, nothing written. The manifests are
those of the revision the snapshot records as applied, loaded as a sync
would load them (the host's name and labels, --allowed-path); when the
cache does not hold that revision, or the source is a directory, explain
says what the snapshot records, and why the rest is missing. A commit is
found by walking the applied revision's first-parent history, newest
first, for the last commit that changed the file's blob; the walk looks
at 1000 commits at most, and stops at the edge of a shallow cache (the
agent's first fetch is shallow): the change is then said to be at or
before the oldest commit it saw.`,
		Example: `  cortex-sync explain /etc/motd
  cortex-sync explain /srv/kb/notes/today.md -o json
  cortex-sync explain --root /tmp/sandbox /tmp/sandbox/etc/motd`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return explainRun(g, o, args[0], io)
		},
	}
	addOutputFlag(cmd, &o.output)
	return cmd
}

func explainRun(g *globals, o *explainOptions, p string, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	root, err := filepath.Abs(g.root)
	if err != nil {
		return fmt.Errorf("--root %s: %w", g.root, err)
	}
	if _, err := explain.InRoot(root, p); err != nil {
		return err
	}
	dir := state.At(g.stateDir)
	snap, err := dir.Load()
	if err != nil {
		return err
	}
	if snap.Serial == 0 {
		return fmt.Errorf("state dir %s holds no snapshot: nothing was applied here with it (check --state-dir, or sync first)", g.stateDir)
	}
	if snap.Root != "" && snap.Root != root {
		return fmt.Errorf("state dir %s records resources applied under --root %s, not %s; give that --root", g.stateDir, snap.Root, root)
	}
	x, err := explain.Explain(explain.Input{
		Root: root, State: dir, Snapshot: snap,
		Options: g.engine().Manifests(), Kinds: driver.Kinds(), Recall: driver.Host{}.Recall,
	}, p)
	if err != nil {
		return err
	}
	if o.output == "json" {
		return printJSON(io.Out, x)
	}
	_, err = fmt.Fprint(io.Out, explainText(x))
	return err
}

// explainText renders an explanation for a person.
func explainText(x *explain.Explanation) string {
	var b strings.Builder
	fmt.Fprintln(&b, x.Path)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) {
		fmt.Fprintf(tw, "  %s:\t"+format+"\n", append([]any{k}, args...)...)
	}
	if x.InRoot != x.Path {
		row("In root", "%s", x.InRoot)
	}
	switch r := x.Resource; {
	case x.Managed == explain.ByMirror:
		row("Managed by", "%s, a mirror entry of %s", r.ID, r.Path)
		row("Source", "%s%s", x.Entry.Source, changeText(x.Entry.Change))
	case r != nil:
		row("Managed by", "%s", r.ID)
	default:
		row("Managed by", "nothing")
		if c := x.Container; c != nil {
			what := "a directory"
			if c.Mirror {
				what = "a mirrored directory"
			}
			purge := "no purge"
			if c.Purge {
				purge = "purge: true"
			}
			row("Inside", "%s (%s, %s, %s)", c.Path, c.ID, what, purge)
		}
	}
	if r := x.Resource; r != nil {
		if m := r.Manifest; m != nil {
			row("Declared in", "%s:%d (document %d)%s", m.File, m.Line, m.Doc, changeText(m.Change))
		}
		if r.Source != "" && x.Managed != explain.ByMirror {
			row("Content from", "%s%s", r.Source, changeText(r.SourceChange))
		}
		if a := r.LastApply; a != nil {
			on := ""
			if a.Revision != "" {
				on = ", on " + shortRevision(a.Revision)
			}
			row("Last applied", "%s, %s%s", a.Action, a.Time.Local().Format(time.DateTime), on)
			if a.Error != "" {
				row("Failed", "%s", oneLine(a.Error))
			}
		} else {
			row("Last applied", "never on this host (not in its inventory)")
		}
		row("Depends on", "%s", orDash(strings.Join(r.DependsOn, ", ")))
		row("Required by", "%s", orDash(strings.Join(r.RequiredBy, ", ")))
		row("Notifies", "%s", orDash(strings.Join(r.Notifies, ", ")))
	}
	if x.Revision != "" {
		applied := ""
		if x.Applied != nil {
			applied = ", applied " + x.Applied.Local().Format(time.DateTime)
		}
		row("Host revision", "%s%s", shortRevision(x.Revision), applied)
	}
	switch n := len(x.Backups); n {
	case 0:
		row("Backups", "none")
	default:
		row("Backups", "%d, newest %s", n, x.Backups[0].Path)
	}
	row("Deletion", "%s", x.Deletion.Why)
	tw.Flush()
	for _, n := range x.Notes {
		fmt.Fprintf(&b, "Note: %s\n", n)
	}
	return b.String()
}

// changeText is ", last changed in <commit> by <author>, <date>: <subject>".
func changeText(c *source.Change) string {
	if c == nil {
		return ""
	}
	when := "last changed in"
	if !c.Exact {
		when = "last changed in or before"
	}
	return fmt.Sprintf(", %s %s by %s, %s: %q", when, c.Hash[:12], c.Author, c.Time.Local().Format(time.DateTime), c.Subject)
}
