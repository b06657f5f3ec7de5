package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

type diffOptions struct {
	src      sourceFlags
	output   string
	exitCode bool
	verify   bool
	against  string
	out      string // a saved plan, for sync --plan
	signKey  string // an SSH private key: --out's plan is signed with it
	limit    int64  // the largest saved plan --out writes
	// prune and allow mirror sync's flags (given here, or under sync
	// --dry-run): the warning names only a refusal that sync would meet,
	// and a saved plan records them.
	prune, allowEmpty, allowSourceChange, acceptRollback bool
}

func newDiffCmd(g *globals, io streams) *cobra.Command {
	o := &diffOptions{}
	cmd := &cobra.Command{
		Use:   "diff",
		Short: "Print what sync would create, update or delete, and why",
		Long: `diff plans a sync without touching the host: desired state from the source,
compared with the last applied snapshot and the live host. Each change says
why it is due: added or changed in Git, drifted or missing on the host,
removed from Git.

With --exit-code it exits 0 when the host is in sync, 1 when there are
changes or drift, and 2 on trouble, like diff(1): a drift check for CI.`,
		Example: `  # What would sync do here, and why?
  cortex-sync diff --dir ./repo

  # A drift check for CI or cron: 0 in sync, 1 changes, 2 trouble
  cortex-sync diff --repo https://git.example.com/infra.git --branch main --path hosts/web1 --exit-code

  # A pull-request comment, planned against what a host runs
  cortex-sync diff --repo "$REPO_URL" --branch "$PR_BRANCH" --against host.json -o markdown

  # Hash every file instead of trusting unchanged stats
  cortex-sync diff --dir ./repo --verify -o json

  # Save the plan for review, then apply exactly it (sync --plan)
  cortex-sync diff --repo "$REPO_URL" --branch main --prune --out plan.json

  # ... signed by the reviewer, for a host that trusts only reviewers' keys
  cortex-sync diff --repo "$REPO_URL" --branch main --out plan.json --sign-key ~/.ssh/id_ed25519`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := diffRun(cmd, g, o, io)
			var ee *exitError
			if o.exitCode && err != nil && !errors.As(err, &ee) {
				return &exitError{code: exitTrouble, err: err}
			}
			return err
		},
	}
	o.src.add(cmd)
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "text, json or markdown")
	cmd.Flags().BoolVar(&o.exitCode, "exit-code", false, "exit 1 when there are changes, 2 on trouble")
	cmd.Flags().BoolVar(&o.verify, "verify", false, "hash every file instead of trusting unchanged stats")
	cmd.Flags().StringVar(&o.against, "against", "", "plan against the revision a snapshot (state export) records, read from Git, instead of the live host")
	cmd.Flags().StringVar(&o.out, "out", "", "also save the plan to this file, for sync --plan to apply exactly it")
	cmd.Flags().StringVar(&o.signKey, "sign-key", "", "sign the saved plan (--out) with this SSH private key, into the plan's name + .sig, for sync --plan-signers")
	cmd.Flags().Int64Var(&o.limit, "limit-plan-bytes", diff.DefaultLimit, "refuse to save (--out) a plan of more bytes than this; sync --plan reads no larger one")
	cmd.Flags().BoolVar(&o.prune, "prune", false, "plan for sync --prune: what left Git is deleted (recorded in --out)")
	cmd.Flags().BoolVar(&o.allowEmpty, "allow-empty", false, "plan for sync --allow-empty (recorded in --out)")
	cmd.Flags().BoolVar(&o.allowSourceChange, "allow-source-change", false, "plan for sync --allow-source-change (recorded in --out)")
	return cmd
}

func diffRun(cmd *cobra.Command, g *globals, o *diffOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json", "markdown"); err != nil {
		return err
	}
	if o.against != "" {
		sandbox, err := os.MkdirTemp("", "cortex-sync-against-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(sandbox)
		if g, err = materializeBase(cmd.Context(), g, o, sandbox); err != nil {
			return err
		}
	}
	ctx := cmd.Context()
	s, done, err := g.session(ctx, &o.src, true, false)
	if err != nil {
		return err
	}
	defer done()
	s.Env.Verify, s.Env.Simulate, s.Env.Exists = o.verify, o.against != "", g.exists
	if o.against != "" {
		// The sandbox's own source is the pull request; its snapshot
		// recorded the base, which is not a change of source.
		s.Snapshot().Source = s.Desired().Ref
	}
	plan := s.Plan(ctx)
	plan.Prune = o.prune
	s.Warn(plan, reconcile.Policy{AllowEmpty: o.allowEmpty, AllowSourceChange: o.allowSourceChange, AcceptRollback: o.acceptRollback})
	if o.out != "" {
		if o.against != "" {
			return errors.New("--out saves a plan of this host; --against plans against another's snapshot")
		}
		if err := writeSaved(o.out, o.limit, plan, s.MadeFor(), diff.SavedPolicy{Prune: o.prune, AllowEmpty: o.allowEmpty, AllowSourceChange: o.allowSourceChange}); err != nil {
			return err
		}
		if err := signOrUnsign(o.out, o.signKey); err != nil {
			return err
		}
	} else if o.signKey != "" {
		return errors.New("--sign-key signs the saved plan: give --out too")
	}
	if o.output != "json" {
		for _, w := range plan.Warnings {
			fmt.Fprintln(io.Err, "warning: "+w)
		}
	}
	if err := render(io, plan, o.output); err != nil {
		return err
	}
	if errs := plan.Errors(); len(errs) > 0 {
		return fmt.Errorf("%s could not be planned (see above)", plural(len(errs), "resource"))
	}
	if o.exitCode && plan.HasChanges() {
		return &exitError{code: exitChanges}
	}
	return nil
}

func render(io streams, plan *diff.Plan, output string) error {
	switch output {
	case "json":
		return diff.JSON(io.Out, plan)
	case "markdown":
		return diff.Markdown(io.Out, plan)
	}
	return diff.Text(io.Out, plan, diff.TextOptions{Color: colorOK(io.Out)})
}

func checkOutput(got string, allowed ...string) error {
	for _, a := range allowed {
		if got == a {
			return nil
		}
	}
	return fmt.Errorf("--output %q: use one of %v", got, allowed)
}

// materializeBase builds, in a sandbox, the host a snapshot describes: the
// desired state at its applied revision, read from Git and synced into a
// throwaway root. It returns globals that point at that sandbox, so the plan
// that follows compares the pull request with what the host runs, with
// real content diffs and prunes, and no host touched.
func materializeBase(ctx context.Context, g *globals, o *diffOptions, sandbox string) (*globals, error) {
	data, err := os.ReadFile(o.against)
	if err != nil {
		return nil, fmt.Errorf("--against: %w", err)
	}
	var snap state.Snapshot
	var facts hostFacts
	if err := json.Unmarshal(data, &snap); err != nil {
		return nil, fmt.Errorf("--against %s: not a snapshot from state export: %v", o.against, err)
	}
	if err := json.Unmarshal(data, &facts); err != nil {
		return nil, fmt.Errorf("--against %s: %v", o.against, err)
	}
	name, sha, ok := strings.Cut(snap.Revision, "@sha1:")
	if !ok || o.src.repo == "" {
		return nil, fmt.Errorf("--against needs --repo and a snapshot of a Git source; %s records revision %q", o.against, snap.Revision)
	}
	sg := *g
	sg.root, sg.stateDir, sg.allowed = filepath.Join(sandbox, "root"), filepath.Join(sandbox, "state"), nil
	if facts.HostFacts != nil {
		sg.exists = facts.HostFacts.Exists
	}
	if err := os.MkdirAll(sg.root, 0o755); err != nil {
		return nil, err
	}
	base := o.src
	base.branch, base.tag, base.semver, base.commit, base.path = name, "", "", sha, snap.Source.Path
	s, done, err := sg.session(ctx, &base, true, true)
	if err != nil {
		// The revision may name a tag rather than a branch.
		base.branch, base.tag, base.commit = "", name, ""
		var terr error
		if s, done, terr = sg.session(ctx, &base, true, true); terr != nil {
			return nil, fmt.Errorf("read the snapshot's revision %s: %w", snap.Revision, err)
		}
	}
	defer done()
	s.Env.Simulate, s.Env.Exists = true, sg.exists
	s.Policy = reconcile.Policy{WaitTimeout: time.Minute}
	rep, err := s.Sync(ctx, s.Plan(ctx), state.Retention{})
	if err != nil {
		return nil, err
	}
	if rep.Failed() {
		why := ""
		for _, res := range rep.Results {
			if res.Outcome == apply.Failed && res.Err != nil {
				why = fmt.Sprintf(": %s: %v", res.ID, res.Err) // e.g. a SOPS file and no --age-key-file
				break
			}
		}
		return nil, fmt.Errorf("could not rebuild the snapshot's revision %s in a sandbox%s", snap.Revision, why)
	}
	return &sg, nil
}

// writeSaved writes a saved plan (0600: it may name what the host holds);
// one larger than limit, which sync --plan would refuse, is not kept.
func writeSaved(name string, limit int64, plan *diff.Plan, made diff.MadeFor, policy diff.SavedPolicy) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	w := &countingWriter{w: f}
	if err := diff.WriteSaved(w, plan, made, policy); err != nil {
		f.Close()
		return fmt.Errorf("--out %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--out %s: %w", name, err)
	}
	if err := diff.CheckSize(w.n, limit); err != nil {
		os.Remove(name)
		return fmt.Errorf("--out %s: the plan is %w; plan a part of the tree at a time (--path), or raise --limit-plan-bytes for diff and sync alike", name, err)
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
