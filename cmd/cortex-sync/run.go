package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

type runOptions struct {
	src               sourceFlags
	interval          time.Duration
	driftInterval     time.Duration
	selfHeal          bool
	prune             bool
	allowEmpty        bool
	allowSourceChange bool
	suspend           bool
	fightThreshold    int
	fightSettle       time.Duration
	waitTimeout       time.Duration
	listen            string
	tokenFile         string
	webhookSecretFile string
	retention         state.Retention
	gate              gateFlags
	etcd              etcdFlags
	singletonTTL      time.Duration
	notify            notifyFlags
}

func newRunCmd(g *globals, io streams) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent: poll, reconcile, heal, and serve metrics and status",
		Long: `run is the agent: it fetches the source every --interval and applies a new
revision; it watches the directories that hold managed paths and the
supervised processes, and heals drift as soon as it is seen (selfHeal), with
a full drift scan every --drift-interval as the safety net. Reconciliation
is keyed by resource on a rate-limited work queue: a failed apply is retried
with backoff, a resource waits for what it depends on, and one that keeps
being undone on the host is reported as fighting.

A new revision is on trial until every process it changed stays healthy
(and every --health-check passes) for --min-ready, within
--progress-deadline; then it is the last known good revision. A bad one is
rolled back to the last good revision (--on-failure rollback), which the
host is held on until a newer commit; see docs/rollback.md.

With --etcd-endpoints the host is in a fleet (docs/fleet.md): it writes its
status to etcd on change, applies a new revision only with a slot of the
rollout of the revision's fleet.yaml, and runs the singleton Processes it
holds. etcd being down stops none of the rest: the host keeps its revision
and keeps healing.

With --notify (the Agent file's notify list) it tells what it decides as it
happens: a signed webhook, a Slack-compatible webhook, and a commit status
per host on GitHub, GitLab or Gitea (docs/notifications.md); delivery never
holds up reconciling.

It serves /metrics, /healthz, /readyz, /api/v1/status, /api/v1/fleet, POST
/api/v1/reconcile and POST /hooks/git on --listen (127.0.0.1:9797).
SIGHUP reloads --config (a bad file keeps the old one); SIGTERM and SIGINT
finish what is in flight, save the snapshot and exit 0, leaving supervised
processes running.

Where a writable cgroup v2 hierarchy contains them, the agent supervises its
state dir's processes itself (a hand-run sync or verb wakes it with
SIGUSR2), and on its way out hands them over to a re-executed supervisor.`,
		Example: `  cortex-sync run --config /etc/cortex-sync/agent.yaml
  cortex-sync run --repo https://git.example.com/infra.git --branch main --path hosts/web1 --prune`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if g.capture != nil {
				g.capture(o) // a reload reads options, and runs nothing
				return nil
			}
			return runAgent(cmd.Context(), g, o, io.Err)
		},
	}
	o.src.add(cmd)
	f := cmd.Flags()
	f.DurationVar(&o.interval, "interval", time.Minute, "how often to fetch the source (±10% jitter)")
	f.DurationVar(&o.driftInterval, "drift-interval", 5*time.Minute, "how often to scan everything for drift, beside the watches")
	f.BoolVar(&o.selfHeal, "self-heal", true, "correct drift as soon as it is seen; false: only report it")
	f.BoolVar(&o.prune, "prune", false, "delete what cortex-sync created that left Git")
	f.BoolVar(&o.allowEmpty, "allow-empty", false, "prune even when the desired set is empty")
	f.BoolVar(&o.allowSourceChange, "allow-source-change", false, "prune even when the source differs from the snapshot's")
	f.BoolVar(&o.suspend, "suspend", false, "start suspended: observe and report, change nothing")
	f.IntVar(&o.fightThreshold, "fight-threshold", agent.DefaultFightThreshold, "corrections of one resource in 10 minutes that make it fighting")
	f.DurationVar(&o.fightSettle, "fight-settle", agent.DefaultFightSettle, "how long a fighting resource must be left alone before it is corrected again")
	f.DurationVar(&o.waitTimeout, "wait-timeout", time.Minute, "how long a dependent waits for a dependency to turn healthy")
	f.StringVar(&o.listen, "listen", agent.DefaultAddr, "address of the HTTP server (metrics, health, status, control, webhooks)")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the bearer token the control endpoints require (needed beyond loopback)")
	f.StringVar(&o.webhookSecretFile, "webhook-secret-file", "", "file holding the push webhooks' shared secret (serves POST /hooks/git)")
	addRetentionFlags(cmd, &o.retention, "once a reconcile converged (at most hourly)")
	o.gate.add(cmd, true)
	o.etcd.add(f)
	f.Var(&o.notify, "notify", `where to tell what the agent decides, as YAML: '{type: webhook, url: URL, secretFile: FILE}' (or slack; github, gitlab, gitea with tokenFile: commit status), with severity:, reasons:, exclude:, dedup:; repeatable (docs/notifications.md)`)
	f.DurationVar(&o.singletonTTL, "singleton-ttl", fleet.DefaultSingletonTTL, "in a fleet, the lease of a singleton this host holds: another host starts it about this long after this one stops answering")
	return cmd
}

// runAgent runs the agent until ctx ends. SIGHUP reloads the config: a
// config that loads replaces the running one (supervised processes keep
// running across); one that does not is logged, and the old one goes on.
//
// The agent supervises its state dir's processes itself, for its whole
// life and across reloads; on its way out it hands them over to a
// re-executed supervisor, so they stay supervised while no agent runs.
func runAgent(ctx context.Context, g *globals, o *runOptions, stderr io.Writer) (err error) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := checkRoot(g.root); err != nil {
		return err
	}
	// A listen address that is refused stops the agent before it makes
	// anything (state dirs, a supervisor).
	if err := agent.CheckListen(o.listen, o.tokenFile); err != nil {
		return err
	}
	if _, _, err := o.notify.notifiers(g, o.src.repo, prometheus.NewRegistry()); err != nil {
		return err // so is a notify entry (checked again by each reload)
	}
	// One agent a state dir, for its whole life (reloads included).
	alock, err := state.At(g.stateDir).LockAgent()
	if err != nil {
		return err
	}
	defer alock.Unlock()
	// One registry for the agent's life: a reload keeps the counters.
	reg := agent.NewRegistry()
	metrics := agent.NewMetrics(reg)
	// A singleton's fence must hold when the agent is SIGKILLed, so a
	// state dir that runs one in a fleet is left to the re-executed
	// supervisor, which outlives the agent.
	host, herr := (*supervise.Host)(nil), error(nil)
	if len(o.etcd.endpoints) > 0 && supervise.HasSingleton(g.stateDir) {
		herr = fmt.Errorf("%w: a singleton's fence must outlive the agent", supervise.ErrOutlive)
	} else {
		host, herr = supervise.NewHost(g.stateDir)
	}
	// outlive hands the processes over to the re-executed supervisor, for
	// the fleet's first singleton.
	outlive := func() error {
		if host == nil {
			return nil
		}
		g.log.Info("handing the supervised processes over to a re-executed supervisor: a singleton's fence must outlive the agent")
		return host.Handover()
	}
	switch {
	case herr == nil:
		g.log.Info("supervising processes in the agent", "state_dir", g.stateDir)
		defer func() {
			g.log.Info("handing the supervised processes over to a re-executed supervisor; they keep running")
			if herr := host.Handover(); herr != nil {
				g.log.Error("hand over the supervised processes", "error", herr)
				if err == nil {
					err = herr
				}
				return
			}
			g.log.Info("handed over; the agent exits")
		}()
	case errors.Is(herr, supervise.ErrNoContainment), errors.Is(herr, supervise.ErrOutlive):
		g.log.Info("supervising processes in a separate supervisor", "reason", herr.Error())
	default:
		g.log.Warn("supervising processes in a separate supervisor", "error", herr)
	}
	for {
		gen, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- runOnce(gen, g, o, reg, metrics, alock, outlive) }()
		for reloaded := false; !reloaded; {
			select {
			case err := <-done:
				cancel()
				return err
			case <-ctx.Done():
				g.log.Info("stopping: finishing what is in flight and saving the snapshot")
				err := <-done
				cancel()
				return err
			case <-hup:
				ng, no, err := reloadOptions(stderr)
				if err != nil {
					g.log.Error("config reload failed; keeping the running config", "error", err)
					continue
				}
				cancel()
				if err := <-done; err != nil {
					return err
				}
				g, o, reloaded = ng, no, true
				g.log.Info("config reloaded")
			}
		}
	}
}

// reloadOptions parses this command line again, re-reading --config. The
// new options log to stderr, as the first did.
func reloadOptions(stderr io.Writer) (*globals, *runOptions, error) {
	var got *runOptions
	var gg *globals
	root := newRootCmd(streams{In: strings.NewReader(""), Out: io.Discard, Err: stderr}, func(g *globals) {
		g.capture = func(o *runOptions) { got, gg = o, g }
	})
	root.SetArgs(os.Args[1:])
	if err := root.Execute(); err != nil {
		return nil, nil, err
	}
	if got == nil {
		return nil, nil, errors.New("the command line does not run the agent")
	}
	if err := checkRoot(gg.root); err != nil {
		return nil, nil, err
	}
	if _, _, err := got.notify.notifiers(gg, got.src.repo, prometheus.NewRegistry()); err != nil {
		return nil, nil, err // a token file gone: keep the running config
	}
	return gg, got, nil
}

// runOnce runs one configuration of the agent and its HTTP server.
func runOnce(ctx context.Context, g *globals, o *runOptions, reg *prometheus.Registry, metrics *agent.Metrics, alock *state.Lock, outlive func() error) (err error) {
	// Like sync, the agent never creates the root: a typo there must stop
	// it at start (systemd says why), not scatter a host into a new tree.
	if err := checkRoot(g.root); err != nil {
		return err
	}
	src, err := o.src.source(state.At(g.stateDir).Sub("cache"), g.log)
	if err != nil {
		return err
	}
	revisions, err := o.gate.policy()
	if err != nil {
		return err
	}
	aopts := agent.Options{
		Engine: g.engine(), Source: src, Interval: o.interval, DriftInterval: o.driftInterval,
		SelfHeal: o.selfHeal, Prune: o.prune, AllowEmpty: o.allowEmpty, AllowSourceChange: o.allowSourceChange,
		Suspend: o.suspend, FightThreshold: o.fightThreshold, FightSettle: o.fightSettle, WaitTimeout: o.waitTimeout,
		Retention: o.retention, Revisions: revisions, Metrics: metrics, Log: g.log, Lock: alock,
		WindowClock: windowClock,
	}
	notifier, notifying, err := o.notify.notifiers(g, o.src.repo, reg)
	if err != nil {
		return err
	}
	aopts.Events = notifier
	link, err := o.etcd.link(g, o.singletonTTL, outlive)
	if err != nil {
		return err
	}
	if link != nil {
		aopts.Fleet = link
		defer func() {
			// After the agent: its singletons stop, then are given up.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if cerr := link.Close(cctx); cerr != nil && err == nil {
				g.log.Warn("leave the fleet", "error", cerr)
			}
		}()
	}
	a := agent.New(aopts)
	opts := agent.ServerOptions{
		Addr: o.listen, Registry: reg, TokenFile: o.tokenFile, Logger: g.log,
		Ready: func(context.Context) error {
			if ok, why := a.Ready(); !ok {
				return errors.New(why)
			}
			return nil
		},
		Degraded:  func(context.Context) string { return a.Degraded() },
		Status:    func(ctx context.Context) (any, error) { return a.Status(ctx), nil },
		Observe:   func(ctx context.Context) { a.Status(ctx) },
		Reconcile: func(context.Context) error { a.Reconcile(agent.TriggerManual); return nil },
		Suspend:   func(context.Context) error { a.Suspend(); return nil },
		Resume:    a.Resume,
		Rollback:  a.Rollback,
		Retry:     a.Retry,
		Events:    a.Events,
	}
	if link != nil {
		opts.Fleet = link.Document
	}
	if o.webhookSecretFile != "" {
		if opts.Webhook, err = agent.NewWebhook(agent.WebhookOptions{
			SecretFile: o.webhookSecretFile, Ref: o.src.followedRef(), Logger: g.log,
			Trigger: func(agent.Push) { a.Reconcile(agent.TriggerWebhook) },
		}); err != nil {
			return fmt.Errorf("webhookSecretFile (--webhook-secret-file): %w", err)
		}
	}
	srv, err := agent.NewServer(opts)
	if err != nil {
		return err
	}
	// The report names the token file for commands run elsewhere: whole.
	tokenFile := o.tokenFile
	if tokenFile != "" {
		if abs, err := filepath.Abs(tokenFile); err == nil {
			tokenFile = abs
		}
	}
	a.Listening(srv.Addr().String(), tokenFile)
	ref := src.Ref()
	g.log.Info("agent started", "listen", srv.Addr().String(), "source", logURL(ref.URL), "ref", o.src.followedRef(), "path", cmp.Or(ref.Path, "."), "root", g.root, "state_dir", g.stateDir)
	// Either ending ends the other: an agent that cannot run must not
	// leave its server answering.
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return srv.Serve(ctx) })
	eg.Go(func() error { notifying(ctx); return nil })
	eg.Go(func() error {
		err := a.Run(ctx)
		if err == nil && ctx.Err() == nil {
			err = errors.New("the agent stopped")
		}
		return err
	})
	return eg.Wait()
}

// followedRef is the ref a push webhook must name to trigger a fetch.
// logURL is a source's URL for the log: a password in it is masked.
func logURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return u.Redacted()
		}
	}
	return s
}

func (s *sourceFlags) followedRef() string {
	switch {
	case s.repo == "":
		return ""
	case s.tag != "":
		return "refs/tags/" + s.tag
	case s.semver != "":
		return "refs/tags/*"
	case s.branch != "":
		return "refs/heads/" + s.branch
	}
	return ""
}

// windowClock is the clock deploy windows are read on; nil, the real one.
// Only the tests set it (main_test.go: CORTEX_SYNC_TEST_CLOCK).
var windowClock func() time.Time
