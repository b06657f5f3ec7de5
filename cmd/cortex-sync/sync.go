package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
)

type syncOptions struct {
	src               sourceFlags
	prune             bool
	dryRun            bool
	allowEmpty        bool
	allowSourceChange bool
	verify            bool
	output            string
	wait              bool
	waitTimeout       time.Duration
	plan              string
	state             stateSyncFlags
}

func newSyncCmd(g *globals, io streams) *cobra.Command {
	o := &syncOptions{}
	cmd := &cobra.Command{
		Use:   "sync",
		Short: "Apply the plan once and report per resource",
		Long: `sync converges the host to the desired state once: it plans as diff does,
then applies the changes in dependency order. Without --prune nothing that
left Git is deleted; deletions declared in Git (ensure: absent, purge, a
file gone from a mirrored directory) always apply.`,
		Example: `  # Apply, and delete what left Git
  cortex-sync sync --dir ./repo --prune

  # Apply a Git branch, then wait until every process is healthy
  cortex-sync sync --repo https://git.example.com/infra.git --branch main --path hosts/web1 --wait

  # Print the plan and change nothing
  cortex-sync sync --dir ./repo --prune --dry-run

  # Apply a plan saved and reviewed earlier, exactly as it was reviewed
  cortex-sync diff --repo https://git.example.com/infra.git --branch main --prune --out plan.json
  cortex-sync sync --repo https://git.example.com/infra.git --branch main --plan plan.json

  # Stop and remove everything cortex-sync manages here: sync an empty set
  mkdir -p /tmp/empty && cortex-sync sync --dir /tmp/empty --prune --allow-empty --allow-source-change`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return syncRun(cmd, g, o, io)
		},
	}
	o.src.add(cmd)
	f := cmd.Flags()
	f.BoolVar(&o.prune, "prune", false, "delete what cortex-sync created that left Git")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the plan and change nothing")
	f.BoolVar(&o.allowEmpty, "allow-empty", false, "prune even when the desired set is empty")
	f.BoolVar(&o.allowSourceChange, "allow-source-change", false, "prune even when the source differs from the last sync's")
	f.BoolVar(&o.verify, "verify", false, "hash every file instead of trusting unchanged stats")
	f.StringVarP(&o.output, "output", "o", "text", "text or json")
	f.BoolVar(&o.wait, "wait", false, "after applying, wait until everything is healthy; exit 1 naming what is not")
	f.DurationVar(&o.waitTimeout, "wait-timeout", time.Minute, "how long --wait, and a dependent of a process with a readiness probe, wait for health")
	f.StringVar(&o.plan, "plan", "", "apply this saved plan (diff --out) and nothing else; refused, changing nothing, if anything it relied on moved")
	o.state.add(cmd)
	return cmd
}

func syncRun(cmd *cobra.Command, g *globals, o *syncOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	ctx := cmd.Context()
	if o.dryRun {
		return diffRun(cmd, g, &diffOptions{src: o.src, output: o.output, verify: o.verify, prune: o.prune, allowEmpty: o.allowEmpty, allowSourceChange: o.allowSourceChange, acceptRollback: o.state.acceptRollback}, io)
	}
	var saved *diff.Saved
	if o.plan != "" {
		var err error
		if saved, err = readSaved(cmd, o); err != nil {
			return err
		}
	}
	s, done, err := g.session(ctx, &o.src, true, true)
	if err != nil {
		return err
	}
	defer done()
	s.Env.Verify = o.verify
	s.Policy = reconcile.Policy{Prune: o.prune, AllowEmpty: o.allowEmpty, AllowSourceChange: o.allowSourceChange, WaitTimeout: o.waitTimeout,
		AcceptRollback: o.state.acceptRollback}
	var rep *apply.Report
	if saved != nil {
		rep, err = s.SyncSaved(ctx, saved, o.state.retention)
	} else {
		s.Env.CountFiles = true // the report counts a tree's changes; it lists none
		rep, err = s.Sync(ctx, s.Plan(ctx), o.state.retention)
	}
	if rep != nil {
		if o.output == "json" {
			rep.JSON(io.Out)
		} else {
			rep.Text(io.Out)
		}
	}
	if err != nil {
		return err
	}
	if rep.Failed() {
		return &exitError{code: exitFailure, err: errors.New("some resources did not apply (see above)")}
	}
	if o.wait {
		if bad := s.WaitHealthy(ctx, rep.Applied(), o.waitTimeout); len(bad) > 0 {
			return &exitError{code: exitFailure, err: fmt.Errorf("not healthy after %s:\n  %s", o.waitTimeout, strings.Join(bad, "\n  "))}
		}
	}
	return nil
}

// readSaved reads the plan sync --plan applies, and pins a branch source to
// the commit it was made at: the plan applies to that revision or to none.
// The policy is the plan's: a flag (or config field) that says otherwise is
// refused.
func readSaved(cmd *cobra.Command, o *syncOptions) (*diff.Saved, error) {
	if o.dryRun {
		return nil, errors.New("--plan applies a plan; to see one, run diff")
	}
	f, err := os.Open(o.plan)
	if err != nil {
		return nil, fmt.Errorf("--plan: %w", err)
	}
	defer f.Close()
	saved, err := diff.ReadSaved(f)
	if err != nil {
		return nil, fmt.Errorf("--plan %s: %w", o.plan, err)
	}
	p := saved.Policy
	for _, c := range []struct {
		flag      string
		set, plan bool
	}{{"prune", o.prune, p.Prune}, {"allow-empty", o.allowEmpty, p.AllowEmpty}, {"allow-source-change", o.allowSourceChange, p.AllowSourceChange}} {
		if cmd.Flags().Changed(c.flag) && c.set != c.plan {
			return nil, fmt.Errorf("--plan applies what the plan was made for, with --%s=%v; give --%s to diff --out instead", c.flag, c.plan, c.flag)
		}
	}
	if _, sha, ok := strings.Cut(saved.Revision, "@sha1:"); ok && o.src.repo != "" && o.src.branch != "" && o.src.commit == "" {
		o.src.commit = sha
	}
	return saved, nil
}
