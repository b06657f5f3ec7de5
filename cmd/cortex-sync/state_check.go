package main

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

func newStateCheckCmd(g *globals, io streams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use: "check",
		Example: `  cortex-sync state check
  cortex-sync state check --state-dir /var/lib/cortex-sync -o json`,
		Short: "Verify the snapshot, its serial and the tree indexes; exit 1 on a problem",
		Long: `check reads everything cortex-sync keeps in the state dir and changes
nothing: state.json (whole, checksummed, not older than the last snapshot
written here), the tree indexes (trees/*.idx), the source stat caches
(cache/*.idx) and temp files a killed write left. Each problem says what
'cortex-sync state repair' would do about it, or what you must do.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			findings := state.At(g.stateDir).Check()
			docs, bad := findingDocs(findings)
			if output == "json" {
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
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func newStateRepairCmd(g *globals, io streams) *cobra.Command {
	return &cobra.Command{
		Use:     "repair",
		Example: `  cortex-sync state repair`,
		Short:   "Rebuild what can be rebuilt in the state dir, and say what cannot",
		Long: `repair takes the state lock, deletes a damaged tree index (the next sync
re-hashes the tree and adopts what matches Git), a damaged source stat
cache and leftover temp files. It never resets a damaged or rolled-back
snapshot: it says what to do instead. Exit 1 when something is left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d := state.At(g.stateDir)
			lock, err := d.Lock(cmd.Context(), g.lockTimeout)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			findings := d.Check() // after the lock swept temp files
			done, err := d.Repair(findings)
			for _, f := range done {
				fmt.Fprintf(io.Out, "repaired %s: %s\n", f.File, f.Fix)
			}
			left := 0
			for _, f := range findings {
				if !f.OK && !f.Repairable {
					left++
					fmt.Fprintf(io.Out, "cannot repair %s: %s\n  to do: %s\n", f.File, f.What, f.Fix)
				}
			}
			if err != nil {
				return err
			}
			if left > 0 {
				return &exitError{code: exitFailure, err: fmt.Errorf("%s left for you in %s", plural(left, "problem"), g.stateDir)}
			}
			if len(done) == 0 {
				fmt.Fprintln(io.Out, "Nothing to repair.")
			}
			return nil
		},
	}
}

func newStateAcceptRollbackCmd(g *globals, io streams) *cobra.Command {
	return &cobra.Command{
		Use:     "accept-rollback",
		Example: `  cortex-sync state accept-rollback   # after restoring state.json from a backup, on purpose`,
		Short:   "Trust a snapshot older than the last one this state dir wrote",
		Long: `When state.json is older than the last snapshot cortex-sync wrote here (a
backup put back, a state dir copied in), its inventory may name files that
cortex-sync no longer owns, and sync --prune refuses to run. Check the
inventory (cortex-sync state export), then accept it: from then on prune
trusts it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d := state.At(g.stateDir)
			lock, err := d.Lock(cmd.Context(), g.lockTimeout)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			snap, err := d.Load()
			if err != nil {
				return err
			}
			if snap.Rollback() == nil {
				fmt.Fprintln(io.Out, "The snapshot is the last one written here: nothing to accept.")
				return nil
			}
			d.AcceptRollback(snap)
			if err := d.Save(snap); err != nil {
				return err
			}
			fmt.Fprintf(io.Out, "Accepted: state.json (lineage %s, now serial %d, %s) is the current snapshot.\n", snap.Lineage, snap.Serial, plural(len(snap.Inventory), "resource"))
			return nil
		},
	}
}

func newStateBackupsCmd(g *globals, io streams) *cobra.Command {
	var output string
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
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			runs, err := state.At(g.stateDir).Backups()
			if err != nil {
				return err
			}
			if output == "json" {
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
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
