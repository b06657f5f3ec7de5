package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cortex-sync/cortex-sync/internal/exemem"
	"github.com/cortex-sync/cortex-sync/pkg/notify"
	"github.com/cortex-sync/cortex-sync/pkg/progress"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// Exit codes, in one place. diff --exit-code follows diff(1): 0 in sync,
// 1 changes found, 2 trouble; every other command: 0 success, 1 failure.
const (
	exitOK      = 0
	exitFailure = 1
	exitChanges = 1
	exitTrouble = 2
)

// exitError carries an exit code; a nil err means nothing more to print.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// streams are the command's IO, injected so tests run commands in-process.
type streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// isTerminal reports whether w is a terminal, for colour.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

// globals are the flags every command shares.
type globals struct {
	root        string
	allowed     []string
	limits      resource.Limits
	stateDir    string
	concurrency int
	logLevel    string
	logFormat   string
	lockTimeout time.Duration
	config      string
	host        hostFlags
	log         *slog.Logger
	// capture, when set, receives the run command's options instead of
	// running it: a SIGHUP reload reads the command line again this way.
	capture func(*runOptions)
	// own are the files the command's flags name that cortex-sync reads its
	// settings and trust from (ownFileFlags): reserved under the root.
	own []reconcile.Own
	// exists is, for a sandbox standing for a host (diff --against), what
	// that host's export says exists of the paths its resources watch.
	exists map[string]bool
	// ageKeyFile is --age-key-file (else SOPS_AGE_KEY_FILE) of a command
	// that plans or applies.
	ageKeyFile string
}

// sourceFlags name where desired state comes from.
type sourceFlags struct {
	dir, path                         string
	repo, branch, tag, semver, commit string
	fetchTimeout                      time.Duration
	auth                              source.Auth
	verifyKeyring                     string
	verifyAllowedSigners              string
	verifyMode                        string
	verifyTags                        bool
	verifyCommitterMatch              bool
}

func (s *sourceFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&s.dir, "dir", "", "read manifests from this local directory")
	f.StringVar(&s.repo, "repo", "", "read manifests from this Git repository (https, http, ssh, git, file URL)")
	f.StringVar(&s.branch, "branch", "", "Git branch to follow (with --commit: the branch to fetch it from)")
	f.StringVar(&s.tag, "tag", "", "Git tag to apply")
	f.StringVar(&s.semver, "semver", "", `apply the highest tag in this semver range, e.g. ">=1.2.0 <2.0.0"`)
	f.StringVar(&s.commit, "commit", "", "Git commit (full SHA-1) to apply; needs --branch")
	f.StringVar(&s.path, "path", ".", "path of the manifests inside the source")
	f.DurationVar(&s.fetchTimeout, "fetch-timeout", 60*time.Second, "bound on every network operation of a fetch")
	f.StringVar(&s.auth.Username, "username", "", "HTTP(S) user name")
	f.StringVar(&s.auth.PasswordFile, "password-file", "", "file holding the HTTP(S) password or token (read on every fetch)")
	f.StringVar(&s.auth.SSHKeyFile, "ssh-key-file", "", "SSH private key file")
	f.StringVar(&s.auth.SSHKeyPassphraseFile, "ssh-key-passphrase-file", "", "file holding the SSH key's passphrase")
	f.StringVar(&s.auth.KnownHostsFile, "known-hosts-file", "", "known_hosts file the SSH server's key must be in (default ~/.ssh/known_hosts)")
	f.BoolVar(&s.auth.InsecureSkipHostKeyCheck, "insecure-skip-host-key-check", false, "do not check the SSH server's host key (insecure)")
	f.StringVar(&s.auth.CAFile, "ca-file", "", "PEM file of extra CA certificates for HTTPS")
	f.StringVar(&s.verifyKeyring, "verify-keyring", "", "armored OpenPGP public keys: refuse a commit not signed by one of them (or by an allowed SSH signer)")
	f.StringVar(&s.verifyAllowedSigners, "verify-allowed-signers", "", "OpenSSH allowed_signers file: refuse a commit not signed by one of its keys for namespace git (or by a keyring key)")
	f.StringVar(&s.verifyMode, "verify-mode", "", "what must be signed: head (the tip commit, the default), tag, tag-and-head, or ancestry (every first-parent commit since the applied one)")
	f.BoolVar(&s.verifyTags, "verify-tags", false, "the same as --verify-mode tag-and-head: with --tag or --semver, require a signed annotated tag too")
	f.BoolVar(&s.verifyCommitterMatch, "verify-committer-match", false, "require the signer to be the committer: its SSH principal or OpenPGP identity is the committer's email")
	addAgeKeyFlag(cmd)
}

func (s *sourceFlags) given() bool { return s.dir != "" || s.repo != "" }

// source builds the configured source. cache may be the zero Dir for a
// directory (no stat cache).
func (s *sourceFlags) source(cache state.Dir, log *slog.Logger) (source.Source, error) {
	switch {
	case s.dir != "" && s.repo != "":
		return nil, errors.New("give --dir or --repo, not both")
	case s.repo != "":
		if cache == (state.Dir{}) {
			return nil, errors.New("a Git source needs a state dir for its cache")
		}
		g := &source.Git{
			URL: s.repo, Branch: s.branch, Tag: s.tag, Semver: s.semver, Commit: s.commit, Path: s.path,
			Cache: cache, Timeout: s.fetchTimeout, Auth: s.auth,
			VerifyKeyring: s.verifyKeyring, VerifyAllowedSigners: s.verifyAllowedSigners, VerifyMode: s.verifyMode,
			VerifyTags: s.verifyTags, VerifyCommitterMatch: s.verifyCommitterMatch, Log: log,
			Base: appliedRevision(cache, s.repo),
		}
		return g, g.Check()
	case s.dir != "":
		if s.verifyKeyring != "" || s.verifyAllowedSigners != "" || s.verifyMode != "" || s.verifyTags || s.verifyCommitterMatch {
			// Silently unverified would be worse than refused.
			return nil, errors.New("--verify-keyring, --verify-allowed-signers, --verify-mode, --verify-tags and --verify-committer-match check Git commits, which a --dir has none of: give --repo, or drop them")
		}
		return &source.Dir{Dir: s.dir, Path: s.path, Cache: cache}, nil
	}
	return nil, errors.New("no source given: pass --dir DIR, or --repo URL with --branch, --tag, --semver or --commit")
}

// appliedRevision reads, from the snapshot beside the cache (a state dir's
// cache is <state dir>/cache), the revision the host runs from url: the
// base of --verify-mode ancestry, and a revision not verified again. It
// reads the file when asked, so a long-running agent sees each revision
// it applies. A cache elsewhere (validate's temporary one) has none.
func appliedRevision(cache state.Dir, url string) func() string {
	if filepath.Base(cache.Path()) != "cache" {
		return nil
	}
	sd := state.At(filepath.Dir(cache.Path()))
	return func() string {
		snap, err := sd.Load()
		if err != nil || snap.Source.Type != "git" || snap.Source.URL != url {
			return ""
		}
		return snap.Revision
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == supervise.ShimArg {
		return supervise.RunShim(args[1:]) // the hidden mode: the state dir's supervisor
	}
	if code, ok := supervise.RunAsInit(args); ok {
		return code // pid 1: a minimal init around a child cortex-sync
	}
	io := streams{In: stdin, Out: stdout, Err: stderr}
	cmd := newRootCmd(io)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "Error:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "Error:", err)
	return exitFailure
}

func newRootCmd(io streams, setup ...func(*globals)) *cobra.Command {
	g := &globals{}
	for _, f := range setup {
		f(g)
	}
	cmd := &cobra.Command{
		Use:   "cortex-sync",
		Short: "Keep this host converged to a Git repository of manifests",
		Long: `cortex-sync is a pull-based GitOps agent for one host. It keeps files,
directory trees, symlinks, supervised processes and one-shot commands
converged to what the manifests in a Git repository (or a directory) say: it
observes the host, compares it with the desired state and with what it last
applied, and takes the smallest action that closes the gap.`,
		Example: `  # Plan, apply, check: a local directory of manifests, synced into a sandbox
  cortex-sync validate ./repo
  cortex-sync diff --dir ./repo --root /tmp/sandbox
  cortex-sync sync --dir ./repo --root /tmp/sandbox --prune
  cortex-sync status --root /tmp/sandbox

  # The agent: poll a Git branch, heal drift, serve metrics and status
  cortex-sync run --config /etc/cortex-sync/agent.yaml`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			var others map[string]string
			if g.config != "" {
				var err error
				if others, err = applyConfig(cmd, g.config); err != nil {
					return err
				}
			}
			if g.logLevel == "" {
				// The agent says what it does (its start, each revision
				// and verdict); a command run by hand only what is wrong.
				g.logLevel = "warn"
				if cmd.Name() == "run" {
					g.logLevel = "info"
				}
			}
			if err := g.setup(io); err != nil {
				return err
			}
			g.own = ownFiles(cmd, others)
			g.own = g.ageKeyFrom(cmd, g.own)
			// Bars for long operations (a first fetch, a large tree), only
			// for a person at a terminal: never in a pipe, a log file or
			// the agent's journal.
			if cmd.Name() != "run" && g.logFormat == "text" && isTerminal(io.Err) {
				cmd.SetContext(progress.With(cmd.Context(), progress.Bars(io.Err)))
			}
			return nil
		},
	}
	cmd.SetOut(io.Out)
	cmd.SetErr(io.Err)
	cmd.SetIn(io.In)
	addVersionFlag(cmd)
	f := cmd.PersistentFlags()
	f.StringVar(&g.root, "root", "/", "re-root every host path cortex-sync reads or writes under this directory")
	f.StringArrayVar(&g.allowed, "allowed-path", nil, "only write below this path (inside --root); repeatable")
	f.StringVar(&g.stateDir, "state-dir", "", "where the snapshot, lock, caches and backups live (default "+state.DefaultDir()+")")
	f.IntVar(&g.concurrency, "concurrency", runtime.NumCPU(), "resources and files worked on at once")
	f.StringVar(&g.logLevel, "log-level", "", "debug, info, warn or error (default info for run, warn for the other commands)")
	f.StringVar(&g.logFormat, "log-format", "text", "text or json")
	f.DurationVar(&g.lockTimeout, "lock-timeout", 30*time.Second, "how long to wait for another cortex-sync holding the state lock")
	l := resource.DefaultLimits
	f.Int64Var(&g.limits.FileBytes, "limit-file-bytes", l.FileBytes, "refuse a manifest file of more bytes than this")
	f.Int64Var(&g.limits.TotalBytes, "limit-total-bytes", l.TotalBytes, "refuse manifests of more bytes than this together")
	f.IntVar(&g.limits.Documents, "limit-documents", l.Documents, "refuse more YAML documents than this in all manifests together")
	f.IntVar(&g.limits.Depth, "limit-depth", l.Depth, "refuse a YAML document nested deeper than this")
	f.StringVar(&g.config, "config", "", "Agent config file (kind: Agent); flags given on the command line win")
	g.host.add(f)
	cmd.AddCommand(
		newValidateCmd(g, io),
		newDiffCmd(g, io),
		newSyncCmd(g, io),
		newStatusCmd(g, io),
		newRunCmd(g, io),
		newControlCmd(g, io, "reconcile", "Ask the running agent to fetch and reconcile now"),
		newControlCmd(g, io, "suspend", "Ask the running agent to stop applying (it goes on observing and reporting)"),
		withLocalResume(newControlCmd(g, io, "resume", "Ask the running agent to apply again; end a rollback by hand"), g, io),
		newRollbackCmd(g, io),
		newRetryCmd(g, io),
		newHistoryCmd(g, io),
		newEventsCmd(g, io),
		newExplainCmd(g, io),
		newStateCmd(g, io),
		newRestartCmd(g, io),
		newStopCmd(g, io),
		newStartCmd(g, io),
		newLogsCmd(g, io),
		newFleetCmd(g, io),
		newHoldCmd(g, io),
		newReleaseCmd(g, io),
		newVersionCmd(io),
	)
	addCompletionExamples(cmd)
	addCompletions(cmd, g)
	return cmd
}

// completionExamples are the examples of cobra's completion commands, which
// come with none (their Long text has the details).
var completionExamples = map[string]string{
	"completion": `  # Completion in this bash session
  source <(cortex-sync completion bash)

  # For every new session (the packages install bash, zsh and fish already)
  cortex-sync completion bash > /etc/bash_completion.d/cortex-sync
  cortex-sync completion zsh > "${fpath[1]}/_cortex-sync"
  cortex-sync completion fish > ~/.config/fish/completions/cortex-sync.fish`,
	"bash": `  source <(cortex-sync completion bash)
  cortex-sync completion bash > /etc/bash_completion.d/cortex-sync`,
	"zsh": `  source <(cortex-sync completion zsh)
  cortex-sync completion zsh > "${fpath[1]}/_cortex-sync"`,
	"fish": `  cortex-sync completion fish | source
  cortex-sync completion fish > ~/.config/fish/completions/cortex-sync.fish`,
	"powershell": `  cortex-sync completion powershell | Out-String | Invoke-Expression`,
}

// addCompletionExamples adds cobra's completion commands now rather than
// when the root runs, so that they can carry examples.
func addCompletionExamples(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = completionExamples[c.Name()]
		for _, sub := range c.Commands() {
			sub.Example = completionExamples[sub.Name()]
		}
	}
}

func (g *globals) setup(io streams) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch g.logFormat {
	case "text":
		g.log = slog.New(slog.NewTextHandler(io.Err, opts))
	case "json":
		g.log = slog.New(slog.NewJSONHandler(io.Err, opts))
	default:
		return fmt.Errorf("--log-format %q: use text or json", g.logFormat)
	}
	if g.stateDir == "" {
		g.stateDir = state.DefaultDir()
	}
	if g.concurrency < 1 {
		return fmt.Errorf("--concurrency %d: must be at least 1", g.concurrency)
	}
	if err := g.host.parse(); err != nil {
		return err
	}
	g.host.value.MachineID = machineID(g.root)
	return nil
}

// config is the engine's configuration from the global flags.
func (g *globals) engine() reconcile.Config {
	return reconcile.Config{Root: g.root, Allowed: g.allowed, Limits: g.limits, StateDir: g.stateDir, Concurrency: g.concurrency, LockTimeout: g.lockTimeout, Log: g.log, Host: g.host.value, Own: g.own, AgeKeyFile: g.ageKeyFile}
}

// ownFileFlags name the files cortex-sync takes its own settings, secrets
// and trust from: a manifest that could rewrite one could steer the agent
// (swap its keyring, its known hosts, its token), so each given is
// reserved like the state dir.
var ownFileFlags = []string{
	"config", "token-file", "webhook-secret-file",
	"password-file", "ssh-key-file", "ssh-key-passphrase-file", "known-hosts-file", "ca-file", "verify-keyring", "verify-allowed-signers", "plan-signers",
	"age-key-file",
	"etcd-cert-file", "etcd-key-file", "etcd-ca-file",
}

// ownFiles are the files among ownFileFlags that cmd's flags name, or the
// config file does for another command (the agent's token file, to a
// sync). The files of an agent running on the state dir are added by the
// engine, from its report.
func ownFiles(cmd *cobra.Command, others map[string]string) []reconcile.Own {
	var own []reconcile.Own
	for _, name := range ownFileFlags {
		v := others[name]
		if f := cmd.Flags().Lookup(name); f != nil {
			v = f.Value.String()
		}
		if v != "" {
			own = append(own, reconcile.Own{Path: v, What: "the file of --" + name})
		}
	}
	// The notify entries' secret and token files.
	var entries []notify.Config
	if f := cmd.Flags().Lookup("notify"); f != nil {
		if nf, ok := f.Value.(*notifyFlags); ok {
			entries = *nf
		}
	} else if others["notify"] != "" {
		entries, _ = notify.ParseList(others["notify"]) // checked by run, not here
	}
	for _, p := range notifyFiles(entries) {
		own = append(own, reconcile.Own{Path: p, What: "a notify entry's secret or token file"})
	}
	return own
}

// load fetches and validates the source's current revision.
func (g *globals) load(ctx context.Context, src *sourceFlags) (*reconcile.Desired, error) {
	s, err := src.source(state.At(g.stateDir).Sub("cache"), g.log)
	if err != nil {
		return nil, err
	}
	return reconcile.Load(ctx, s, g.engine().Manifests(), g.log)
}

// session opens the host and the snapshot, with the desired state when a
// source is given (or needed); write takes the state lock first. done
// releases everything.
func (g *globals) session(ctx context.Context, src *sourceFlags, needSource, write bool) (*reconcile.Session, func(), error) {
	oneShot(write)
	if err := checkRoot(g.root); err != nil {
		return nil, nil, err
	}
	var desired *reconcile.Desired
	if needSource || src.given() {
		var err error
		if desired, err = g.load(ctx, src); err != nil {
			return nil, nil, err
		}
	}
	s, err := reconcile.Open(ctx, g.engine(), desired, write)
	if err != nil {
		if desired != nil {
			desired.Close()
		}
		return nil, nil, err
	}
	return s, func() {
		s.Close()
		if desired != nil {
			desired.Close()
		}
	}, nil
}

// oneShotMemoryLimit and oneShotGCPercent pace the collector for a
// command that plans or syncs once. A converged check keeps little live
// (the indexes are read in place, a few MB at 45,912 files) but allocates
// as it goes: at GOGC=100 it collected 7 times at 11,478 files and 16 at
// 45,912; at 200, 2 and 13, for the same peak RSS (26 and 27–28 MB). At
// GOGC=50 it had collected 83 times and spent 12% more CPU for memory it
// did not hold. At 400 it collects once at 11,478 files (6% less CPU
// than at 200) and, paced by the limit, 8 times at 45,912 as at 200, for
// the same peak RSS (24 and 26 MB). A plan that lists every file of a
// large tree does hold it: the limit paces the collector closer to what
// is live once the heap nears 20 MiB (a first diff of 45,912 files peaks
// at 29–30 MB so; 42 MB without it). The limit is soft: a heap that must
// grow past it does. GOGC or GOMEMLIMIT, when set, win.
//
// A command that writes keeps more live, whatever the tree's size: a
// batch of 4096 files staged, its intents, and the layers of two indexes
// (2 MiB each, pkg/index) besides the walk's, about 10 MB. Against 20 MiB
// the collector's goal was the live heap itself: a first sync of
// 1,000,000 files collected 25,665 times. At 24 MiB it collects after
// allocating a few MB; at 28 MiB the process's peak RSS reached 40 MB
// (14 MB of it the executable's pages).
const (
	oneShotMemoryLimit      = 20 << 20
	oneShotWriteMemoryLimit = 24 << 20
	oneShotGCPercent        = 400
)

// oneShot readies the process for one plan or sync over what may be a
// large tree: the collector paced to what is live, and the executable's
// pages that starting faulted in released (most are never used again;
// what is faults back in from the page cache). A command that writes
// (write) is paced to oneShotWriteMemoryLimit.
func oneShot(write bool) {
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetGCPercent(oneShotGCPercent)
		debug.SetMemoryLimit(oneShotMemoryLimit)
		if write {
			debug.SetMemoryLimit(oneShotWriteMemoryLimit)
		}
	}
	exemem.Release() // failing, the pages stay mapped
}
