package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/state"
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
	o.state.add(cmd)
	return cmd
}

func syncRun(cmd *cobra.Command, g *globals, o *syncOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	ctx := cmd.Context()
	if o.dryRun {
		return diffRun(cmd, g, &diffOptions{src: o.src, output: o.output, verify: o.verify, allowEmpty: o.allowEmpty, allowSourceChange: o.allowSourceChange}, io)
	}
	lock, err := state.Dir{Path: g.stateDir}.Lock(ctx, g.lockTimeout)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	e, err := g.open(ctx, &o.src, true)
	if err != nil {
		return err
	}
	defer e.Close()
	e.env.Verify = o.verify
	host := driver.Host{Env: e.env}
	plan := diff.Make(ctx, host, e.set, e.snap, g.concurrency)
	opts := apply.Options{
		Prune: o.prune, AllowEmpty: o.allowEmpty, AllowSourceChange: o.allowSourceChange,
		Concurrency: g.concurrency, Save: e.state.Save, Log: g.log, WaitTimeout: o.waitTimeout,
	}
	if err := o.state.before(e, o.prune, g.log); err != nil {
		return err
	}
	if err := apply.Check(plan, e.set, e.snap, e.ref, opts); err != nil {
		return err
	}
	e.snap.Source = e.ref
	rep, err := apply.Run(ctx, host, e.set, plan, e.snap, opts)
	if err == nil {
		// The revision counts as applied only when all of it was.
		now := timeNow()
		e.snap.LastAttempt, e.snap.LastSyncTime = rep.Attempt(e.checkout.Revision, now), now
		if !rep.Failed() {
			e.snap.Revision = e.checkout.Revision
		}
		err = e.state.Save(e.snap)
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
	o.state.after(e, g.log)
	if o.wait {
		if bad := apply.WaitHealthy(ctx, host, e.snap, o.waitTimeout); len(bad) > 0 {
			return &exitError{code: exitFailure, err: fmt.Errorf("not healthy after %s:\n  %s", o.waitTimeout, strings.Join(bad, "\n  "))}
		}
	}
	return nil
}
