package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
)

func newRetryCmd(g *globals, io streams) *cobra.Command {
	o := &controlOptions{}
	cmd := &cobra.Command{
		Use:   "retry",
		Short: "Apply a revision a rollback refused, anyway",
		Long: `retry ends what keeps the source's newest revision off the host after a
rollback: the refusal of a bad revision (it is not applied again until a
newer commit) and the hold of the rollback. With an agent running it asks
the agent, which fetches and applies the revision at once, and judges it
again; without one the next sync applies it.`,
		Example: `  cortex-sync retry
  cortex-sync retry --address 127.0.0.1:9797 --token-file /etc/cortex-sync/token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return retryRun(cmd.Context(), g, o, io)
		},
	}
	addControlFlags(cmd, o)
	return cmd
}

func retryRun(ctx context.Context, g *globals, o *controlOptions, io streams) error {
	rev, addr, err := askAgent(g, o, "retry", nil)
	if !errors.Is(err, errNoAgent) {
		if err != nil {
			return err
		}
		_, err := fmt.Fprintf(io.Out, "retry: the agent at %s applies %s again\n", addr, rev)
		return err
	}
	s, l, err := life(ctx, g)
	if err != nil {
		return err
	}
	defer s.Close()
	if rev, err = l.Retry(ctx); err != nil {
		return err
	}
	_, err = fmt.Fprintf(io.Out, "retry: %s is no longer refused; the next sync applies it\n", rev)
	return err
}

// life opens the host's revisions without an agent, to end a hold: the
// session is the caller's to close.
func life(ctx context.Context, g *globals) (*reconcile.Session, *reconcile.Life, error) {
	if err := checkRoot(g.root); err != nil {
		return nil, nil, err
	}
	s, err := reconcile.Open(ctx, g.engine(), nil, true)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Life(nil, g.engine().Manifests()), nil
}

// withLocalResume lets resume end a rollback by hand where no agent runs.
func withLocalResume(cmd *cobra.Command, g *globals, io streams) *cobra.Command {
	asked := cmd.RunE
	cmd.Long = `resume asks the running agent to apply again after suspend, and ends a
rollback by hand (cortex-sync rollback): the source's newest revision is
applied again. Where no agent runs, it ends the rollback in the state dir,
and the next sync applies the newest revision. An automatic rollback (of a
revision judged bad) is not ended by resume: it says so, and exits 1;
cortex-sync retry applies that revision anyway, and a newer commit ends it.
With nothing to end, resume says so and exits 1.`
	cmd.RunE = func(c *cobra.Command, args []string) error {
		err := asked(c, args)
		if !errors.Is(err, errNoAgent) || c.Flags().Changed("address") || reconcile.ReadAgentReport(stateDirOf(g)) != nil {
			return err
		}
		s, l, lerr := life(c.Context(), g)
		if lerr != nil {
			return lerr
		}
		defer s.Close()
		rev, rerr := l.Resume(c.Context())
		if rerr != nil {
			return fmt.Errorf("%w (no agent runs here)", rerr)
		}
		if a := s.View().Latest(rev); a != nil && a.Refused {
			_, werr := fmt.Fprintf(io.Out, "resume: the rollback by hand ends; %s was judged bad and stays refused: the next sync applies a newer commit (cortex-sync retry applies it anyway)\n", rev)
			return werr
		}
		_, werr := fmt.Fprintf(io.Out, "resume: the rollback by hand ends; the next sync applies %s or newer\n", rev)
		return werr
	}
	return cmd
}

// addControlFlags adds the flags that reach a running agent.
func addControlFlags(cmd *cobra.Command, o *controlOptions) {
	f := cmd.Flags()
	f.StringVar(&o.address, "address", "", "HOST:PORT of the running agent (default: where the agent running on --state-dir listens, else the config's listen, else "+agent.DefaultAddr+")")
	f.StringVar(&o.listen, "listen", agent.DefaultAddr, "the agent's listen address (from --config)")
	f.MarkHidden("listen")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the agent's bearer token (default: the one the agent running on --state-dir uses, without --address)")
}
