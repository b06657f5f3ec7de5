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
	rev, _, err = release(ctx, g, true)
	if err != nil {
		return err
	}
	if rev == "" {
		return errors.New("nothing to retry: no revision is refused, and no rollback holds the host")
	}
	_, err = fmt.Fprintf(io.Out, "retry: %s is no longer refused; the next sync applies it\n", rev)
	return err
}

// release ends the rollback that holds the host, without an agent: a
// manual one (resume), or any, with the refusal of its revision (retry,
// all). It returns the revision held back, "" when nothing was, and
// whether it stays refused (judged bad before: only retry lets it in).
func release(ctx context.Context, g *globals, all bool) (rev string, refused bool, err error) {
	if err := checkRoot(g.root); err != nil {
		return "", false, err
	}
	s, err := reconcile.Open(ctx, g.engine(), nil, true)
	if err != nil {
		return "", false, err
	}
	defer s.Close()
	rev, err = s.Release(ctx, all)
	if a := s.View().Latest(rev); a != nil && rev != "" {
		refused = a.Refused
	}
	return rev, refused, err
}

// withLocalResume lets resume end a rollback by hand where no agent runs.
func withLocalResume(cmd *cobra.Command, g *globals, io streams) *cobra.Command {
	asked := cmd.RunE
	cmd.Long = `resume asks the running agent to apply again after suspend, and ends a
rollback by hand (cortex-sync rollback): the source's newest revision is
applied again. Where no agent runs, it ends the rollback in the state dir,
and the next sync applies the newest revision.`
	cmd.RunE = func(c *cobra.Command, args []string) error {
		err := asked(c, args)
		if !errors.Is(err, errNoAgent) || c.Flags().Changed("address") || reconcile.ReadAgentReport(stateDirOf(g)) != nil {
			return err
		}
		rev, refused, rerr := release(c.Context(), g, false)
		switch {
		case rerr != nil:
			return rerr
		case rev == "":
			return fmt.Errorf("%w, and no rollback by hand holds the host here: nothing to resume", err)
		case refused:
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
