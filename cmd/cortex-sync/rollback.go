package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

type rollbackOptions struct {
	control           controlOptions
	src               sourceFlags
	to                string
	prune             bool
	allowEmpty        bool
	allowSourceChange bool
	output            string
}

func newRollbackCmd(g *globals, io streams) *cobra.Command {
	o := &rollbackOptions{}
	cmd := &cobra.Command{
		Use:   "rollback",
		Short: "Apply the last good revision (or one named) and hold the host there",
		Long: `rollback applies the last known good revision — or, with --to, any revision
this host applied before (cortex-sync history lists them; one judged bad
is applied with a warning) — as any revision is applied: files, trees,
processes and commands. The host is then held
there: the source's newest revision is not applied until a newer commit
arrives, or cortex-sync resume.

With an agent running it asks the agent (--address, as reconcile does);
without one it fetches the revision from the Git cache and applies it
itself. The source is the host's (its repository and path, the revision's
branch) unless --repo and the other source flags, or --config, say
otherwise.`,
		Example: `  cortex-sync rollback                                   # to the last good revision
  cortex-sync rollback --to main@sha1:4b825dc642cb        # a revision applied before (a unique prefix will do)
  cortex-sync resume                                     # follow the source again`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return rollbackRun(cmd.Context(), g, o, io)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.to, "to", "", "the revision to go back to (default the last good one)")
	f.BoolVar(&o.prune, "prune", false, "without an agent: delete what cortex-sync created that the revision does not declare")
	f.BoolVar(&o.allowEmpty, "allow-empty", false, "prune even when the desired set is empty")
	f.BoolVar(&o.allowSourceChange, "allow-source-change", false, "prune even when the source differs from the last sync's")
	f.StringVarP(&o.output, "output", "o", "text", "text or json")
	addControlFlags(cmd, &o.control)
	o.src.add(cmd)
	return cmd
}

func rollbackRun(ctx context.Context, g *globals, o *rollbackOptions, io streams) error {
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	rev, addr, err := askAgent(g, &o.control, "rollback", url.Values{"to": {o.to}})
	if !errors.Is(err, errNoAgent) {
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(io.Out, "rollback: the agent at %s rolls back to %s, and holds the host there until a newer commit or cortex-sync resume\n", addr, rev); err != nil {
			return err
		}
		if snap, err := stateDirOf(g).Load(); err == nil {
			warnJudgedBad(io, snap, rev)
		}
		return nil
	}
	// No agent: the rollback runs here.
	oneShot(true)
	if err := checkRoot(g.root); err != nil {
		return err
	}
	s, err := reconcile.Open(ctx, g.engine(), nil, true)
	if err != nil {
		return err
	}
	defer s.Close()
	s.Policy = reconcile.Policy{Prune: o.prune, AllowEmpty: o.allowEmpty, AllowSourceChange: o.allowSourceChange, WaitTimeout: time.Minute}
	snap := s.Snapshot()
	if rev, err = reconcile.ResolveApplied(snap, o.to); err != nil {
		return err
	}
	src, err := hostSource(g, &o.src, snap, rev)
	if err != nil {
		return err
	}
	out, err := s.Life(src, g.engine().Manifests()).Rollback(ctx, rev, "", time.Now())
	if err != nil {
		return err
	}
	if out.Desired != nil {
		defer out.Desired.Close()
	}
	rep, err := s.Sync(ctx, s.Plan(ctx), state.Retention{})
	printReport(io, o.output, rep)
	if err != nil {
		return err
	}
	if rep.Failed() {
		return &exitError{code: exitFailure, err: fmt.Errorf("the rollback to %s did not apply in full (see above); the host is held on it until a newer commit or cortex-sync resume", rev)}
	}
	if o.output == "text" {
		fmt.Fprintf(io.Out, "Rolled back to %s; held there until a newer commit or cortex-sync resume.\n", rev)
		warnJudgedBad(io, snap, rev)
	}
	return nil
}

// warnJudgedBad says so when the revision asked for was judged bad when it
// was applied: a rollback to it is allowed (it is what was asked), but
// rarely what was meant.
func warnJudgedBad(io streams, snap *state.Snapshot, rev string) {
	if a := snap.Latest(rev); a != nil && a.Verdict == state.Bad {
		fmt.Fprintf(io.Err, "warning: %s was judged bad when it was applied (%s); cortex-sync history lists the good ones\n", rev, a.Reason)
	}
}

// askAgent asks the agent to move the host (rollback, retry) and returns
// the revision it named: the agent running on this state dir, or the one
// --address names. errNoAgent says there is none: the caller does it
// itself. (An agent of another state dir listening where this one would
// is never asked.)
func askAgent(g *globals, o *controlOptions, verb string, query url.Values) (rev, addr string, err error) {
	o.state = stateDirOf(g)
	if o.address == "" && reconcile.ReadAgentReport(stateDirOf(g)) == nil {
		return "", "", fmt.Errorf("%w on %s", errNoAgent, g.stateDir)
	}
	addr, body, err := o.post(verb, query)
	if errors.Is(err, errNoAgent) {
		// An agent runs here (or was named) and is silent: no longer
		// errNoAgent, so the caller does not act beside it.
		return "", addr, fmt.Errorf("%v; nothing was done", err)
	}
	if err != nil {
		return "", addr, err
	}
	var answer struct{ Revision string }
	if err := json.Unmarshal(body, &answer); err != nil {
		return "", addr, fmt.Errorf("the agent at %s answered %s with %q", addr, verb, strings.TrimSpace(string(body)))
	}
	return answer.Revision, addr, nil
}

// stateDirOf is the state dir the global flags name.
func stateDirOf(g *globals) state.Dir { return state.At(g.stateDir) }

// hostSource is where to fetch rev from: the source flags, when given;
// else the host's own source, as the snapshot records it, on the branch
// the revision names.
func hostSource(g *globals, src *sourceFlags, snap *state.Snapshot, rev string) (source.Source, error) {
	if !src.given() {
		name, _, _ := strings.Cut(rev, "@sha1:")
		if snap.Source.Type != "git" {
			return nil, fmt.Errorf("%w: the host's source is %s %s; give the Git source (--repo, --branch) to fetch %s from", reconcile.ErrNoHistory, snap.Source.Type, snap.Source.URL, rev)
		}
		src.repo, src.branch, src.path = snap.Source.URL, name, snap.Source.Path
	}
	return src.source(state.At(g.stateDir).Sub("cache"), g.log)
}

// printReport prints a sync's report, when there is one, as output says.
func printReport(io streams, output string, rep *apply.Report) {
	switch {
	case rep == nil:
	case output == "json":
		rep.JSON(io.Out)
	default:
		rep.Text(io.Out)
	}
}
