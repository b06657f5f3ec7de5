package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// idArgs are the commands whose argument is a resource ID, and the kinds
// each takes: their completions come from the snapshot's inventory.
var idArgs = map[string][]string{
	"restart": {"Process"},
	"stop":    {"Process"},
	"start":   {"Process"},
	"logs":    {"Process", "Command"},
}

// outputs are the values an --output flag can take, as its usage names them.
var outputs = []string{"text", "json", "markdown"}

// addCompletions gives the shells what this host knows: resource IDs from
// the snapshot of the state dir, the revisions it applied for rollback
// --to, each command's -o values; and a mistyped flag a "did you mean".
func addCompletions(root *cobra.Command, g *globals) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if kinds, ok := idArgs[c.Name()]; ok && c.Parent() == root {
			c.ValidArgsFunction = completeIDs(g, kinds)
		}
		if f := c.Flags().Lookup("output"); f != nil {
			var values []string
			for _, v := range outputs {
				if strings.Contains(f.Usage, v) {
					values = append(values, v)
				}
			}
			_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
		}
		if c.Name() == "rollback" && c.Flags().Lookup("to") != nil {
			_ = c.RegisterFlagCompletionFunc("to", completeRevisions(g))
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	root.SetFlagErrorFunc(suggestFlag)
}

// completionState is the snapshot of the state dir the command line names
// (--state-dir, or its --config's stateDir, or the default one); an empty
// one when it cannot be read: a completion never fails aloud.
func completionState(cmd *cobra.Command, g *globals) *state.Snapshot {
	if g.config != "" {
		_, _ = applyConfig(cmd, g.config) // flags given on the line win, as when it runs
	}
	dir := g.stateDir
	if dir == "" {
		dir = state.DefaultDir()
	}
	snap, err := state.At(dir).Load()
	if err != nil {
		return &state.Snapshot{}
	}
	return snap
}

func completeIDs(g *globals, kinds []string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var ids []cobra.Completion
		for _, e := range completionState(cmd, g).Inventory {
			if slices.Contains(kinds, e.Kind) && strings.HasPrefix(e.ID, toComplete) {
				ids = append(ids, e.ID)
			}
		}
		slices.Sort(ids)
		return ids, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeRevisions lists the revisions this host applied, newest first,
// each with its commit's subject.
func completeRevisions(g *globals) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		hist := completionState(cmd, g).History
		var revs []cobra.Completion
		seen := map[string]bool{}
		for i := len(hist) - 1; i >= 0; i-- {
			a := hist[i]
			if seen[a.Revision] || !strings.HasPrefix(a.Revision, toComplete) {
				continue
			}
			seen[a.Revision] = true
			revs = append(revs, cobra.CompletionWithDesc(a.Revision, oneLine(a.Subject)))
		}
		return revs, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
	}
}

// suggestFlag adds the closest flag of the command to an unknown one.
func suggestFlag(cmd *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) || ne.GetSpecifiedShortnames() != "" {
		return err
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, "--"+f.Name)
		}
	})
	if hint := resource.DidYouMean("--"+ne.GetSpecifiedName(), names); hint != "" {
		return fmt.Errorf("%w%s", err, hint)
	}
	return err
}
