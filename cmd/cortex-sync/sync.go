package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
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
	plan              string
	planLimit         int64
	planSigners       string
	state             stateSyncFlags
	gate              gateFlags
	rollbackOnFailure bool
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

  # From cron: apply, judge the revision, and go back to the last good one if it is bad
  cortex-sync sync --repo https://git.example.com/infra.git --branch main --rollback-on-failure --min-ready 10s

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
	f.BoolVar(&o.wait, "wait", false, "after applying, wait until what the sync changed is healthy (and the health checks pass); exit 1 naming what is not")
	f.BoolVar(&o.rollbackOnFailure, "rollback-on-failure", false, "with --wait's health gate: a bad revision is rolled back to the last good one at once, and refused until a newer commit")
	f.DurationVar(&o.waitTimeout, "wait-timeout", time.Minute, "how long --wait, and a dependent of a process with a readiness probe, wait for health")
	f.StringVar(&o.plan, "plan", "", "apply this saved plan (diff --out) and nothing else; refused, changing nothing, if anything it shows or relied on moved, or the file was edited")
	f.Int64Var(&o.planLimit, "limit-plan-bytes", diff.DefaultLimit, "refuse a saved plan (--plan) of more bytes than this, before reading it")
	f.StringVar(&o.planSigners, "plan-signers", "", "an OpenSSH allowed_signers file: --plan applies only a plan signed (PLAN.sig, diff --sign-key) by one of its keys")
	o.state.add(cmd)
	o.gate.add(cmd, false)
	return cmd
}

func syncRun(cmd *cobra.Command, g *globals, o *syncOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	ctx := cmd.Context()
	switch {
	case o.dryRun && o.plan != "":
		// A dry run would plan afresh and pass a plan the real run refuses.
		return errors.New("--plan applies a saved plan and --dry-run applies nothing: to see a plan, run diff; to check one, run sync --plan without --dry-run (it refuses, changing nothing, when the plan does not hold)")
	case o.plan == "" && cmd.Flags().Changed("plan-signers"):
		return errors.New("--plan-signers checks the signature of a saved plan: give --plan too")
	}
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
	revisions, err := o.gate.policy()
	if err != nil {
		return err
	}
	revisions.ProgressDeadline = o.waitTimeout
	s.Policy = reconcile.Policy{Prune: o.prune, AllowEmpty: o.allowEmpty, AllowSourceChange: o.allowSourceChange, WaitTimeout: o.waitTimeout,
		AcceptRollback: o.state.acceptRollback, Revisions: revisions}
	if !o.rollbackOnFailure {
		s.Policy.Revisions.OnFailure = reconcile.OnFailureHalt // a bad revision is said, and stays
	}
	var src source.Source // where earlier revisions come from: Git only
	if o.src.repo != "" {
		if src, err = o.src.source(state.At(g.stateDir).Sub("cache"), g.log); err != nil {
			return err
		}
	}
	l := s.Life(src, g.engine().Manifests())
	head, start := s.Desired(), time.Now()
	out := l.Offer(ctx, head, nil, o.wait || o.rollbackOnFailure, start)
	if out.Desired != nil && out.Desired != head {
		defer out.Desired.Close()
	}
	if out.Phase == reconcile.PhaseHeld {
		if out.Desired == nil || s.Snapshot().Revision == out.To {
			return fmt.Errorf("revision %s is not applied: %w", head.Revision(), out.Why)
		}
		// A rollback recorded and not finished (its run was killed):
		// this sync finishes it.
		fmt.Fprintf(io.Err, "finishing the rollback to %s: %v\n", out.To, out.Why)
		saved, o.wait, o.rollbackOnFailure = nil, false, false
	}
	var rep *apply.Report
	if saved != nil {
		rep, err = s.SyncSaved(ctx, saved, o.state.retention)
	} else {
		s.Env.CountFiles = true // the report counts a tree's changes; it lists none
		rep, err = s.Sync(ctx, s.Plan(ctx), o.state.retention)
	}
	printReport(io, o.output, rep)
	if err != nil {
		return err
	}
	if !o.wait && !o.rollbackOnFailure {
		if rep.Failed() {
			return &exitError{code: exitFailure, err: errors.New("some resources did not apply (see above)")}
		}
		if out.Phase != reconcile.PhaseHeld {
			l.Applied(s.Desired(), start) // applied, not judged
		}
		return nil
	}
	return judgeSync(ctx, o, io, s, l, out.Trial, start)
}

// judgeSync puts the revision a sync applied through the health gate (its
// trial, or, for a revision judged before that the host is on, a look at
// what this sync applied): every process it changed healthy (and every
// health check passing) for --min-ready, within --wait-timeout; a bad one
// exits 1 naming what failed, and with --rollback-on-failure goes back to
// the last good revision first. Its life decides; this maps and applies.
func judgeSync(ctx context.Context, o *syncOptions, io streams, s *reconcile.Session, l *reconcile.Life, t *reconcile.Trial, start time.Time) error {
	d := s.Desired()
	if t == nil {
		t = &reconcile.Trial{Revision: d.Revision(), Start: start, Keys: []resource.ID{}} // judged before, and on it: judged again
	}
	out := l.Verdict(ctx, t, s.Await(ctx, t, nil))
	rev := orDirectory(t.Revision)
	switch {
	case out.Phase == reconcile.PhaseGood:
		return nil
	case out.Phase == reconcile.PhaseOnTrial:
		return &exitError{code: exitFailure, err: fmt.Errorf("revision %s was not judged: %s", rev, out.Judgement.Why())}
	case out.Phase == reconcile.PhaseHalted && !o.rollbackOnFailure:
		return &exitError{code: exitFailure, err: fmt.Errorf("revision %s is bad: %s", rev, out.Judgement.Why())}
	case out.Phase == reconcile.PhaseHalted:
		return &exitError{code: exitFailure, err: fmt.Errorf("revision %s is bad: %w", rev, out.Why)}
	}
	defer out.Desired.Close()
	bad := fmt.Errorf("revision %s is bad: %s", rev, out.Judgement.Why())
	s.Config.Log.Error("revision bad; rolling back to the last good revision", "revision", t.Revision, "to", out.To, "failing", out.Judgement.Failing, "reason", out.Judgement.Reason)
	fmt.Fprintf(io.Out, "\nRevision %s is bad; rolling back to %s:\n", shortRevision(t.Revision), shortRevision(out.To))
	back, err := s.Sync(ctx, s.Plan(ctx), o.state.retention)
	printReport(io, o.output, back)
	if err != nil {
		return fmt.Errorf("%w; and the rollback to %s failed: %w", bad, out.To, err)
	}
	return &exitError{code: exitFailure, err: fmt.Errorf("%w; rolled back to %s, and refused until a newer commit (cortex-sync retry applies it anyway)", bad, out.To)}
}

// orDirectory names a revision, or a directory source's, which has none.
func orDirectory(rev string) string {
	if rev == "" {
		return "(a directory)"
	}
	return rev
}

// readSaved reads the plan sync --plan applies, and pins a branch source to
// the commit it was made at: the plan applies to that revision or to none.
// The policy is the plan's: a flag (or config field) that says otherwise is
// refused. What the file says is a claim: SyncSaved checks every word of
// it against the plan made again. A file larger than --limit-plan-bytes
// is refused before it is read.
func readSaved(cmd *cobra.Command, o *syncOptions) (*diff.Saved, error) {
	if o.state.acceptRollback {
		return nil, errors.New("--plan applies what the plan was made for, and a plan is made without --accept-state-rollback; run cortex-sync state accept-rollback, then make the plan again with diff --out")
	}
	f, err := os.Open(o.plan)
	if err != nil {
		return nil, fmt.Errorf("--plan: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("--plan: %w", err)
	}
	if st.Mode().IsRegular() {
		if err := diff.CheckSize(st.Size(), o.planLimit); err != nil {
			return nil, fmt.Errorf("--plan %s is %w: not read; a plan that large is made with diff --limit-plan-bytes, and read with the same --limit-plan-bytes here", o.plan, err)
		}
	}
	var r io.Reader = f
	if o.planSigners != "" {
		// What is checked is what is read: the bytes, read once.
		data, err := io.ReadAll(io.LimitReader(f, o.planLimit+1))
		if err != nil {
			return nil, fmt.Errorf("--plan: %w", err)
		}
		who, err := checkPlanSignature(o.plan, data, o.planSigners)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: signed by %s\n", o.plan, who)
		r = bytes.NewReader(data)
	}
	saved, err := diff.ReadSaved(r, o.planLimit)
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
