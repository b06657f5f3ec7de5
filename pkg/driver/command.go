package driver

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// CommandSpec is a one-shot command: run once for each revision of its
// effective spec, unless a guard says it need not.
type CommandSpec struct {
	resource.Base `yaml:",inline"`
	Exec          `yaml:",inline"`
	Timeout       resource.Duration `yaml:"timeout" json:"timeout,omitempty"` // default 5m
	// Creates is a path (under --root): when it exists, the command need not run.
	Creates string `yaml:"creates" json:"creates,omitempty"`
	// Unless: when it exits 0, the command need not run.
	Unless []string `yaml:"unless" json:"unless,omitempty"`
	// OnlyIf: when it exits non-zero, the command need not run.
	OnlyIf []string `yaml:"onlyIf" json:"onlyIf,omitempty"`
	// RefreshOn names resources whose change makes it run again.
	RefreshOn []resource.ID `yaml:"refreshOn" json:"refreshOn,omitempty"`
	// RetryDelay is how long a failed command waits before it is tried
	// again (default 5s), doubling with each failure in a row up to
	// MaxRetryDelay (default 10m). A change of its spec runs it at once.
	RetryDelay    resource.Duration `yaml:"retryDelay" json:"retryDelay,omitempty"`
	MaxRetryDelay resource.Duration `yaml:"maxRetryDelay" json:"maxRetryDelay,omitempty"`
}

// Validate checks the Command's fields.
func (s *CommandSpec) Validate(v *resource.Validation) {
	s.Exec.validate(v)
	if s.Creates != "" {
		v.AbsPath("spec.creates", s.Creates)
	}
	if s.Unless != nil {
		validateCommand(v, "spec.unless", s.Unless)
	}
	if s.OnlyIf != nil {
		validateCommand(v, "spec.onlyIf", s.OnlyIf)
	}
	if s.MaxRetryDelay > 0 && s.MaxRetryDelay.Std() < s.retryDelay() {
		v.Errorf("spec.maxRetryDelay", "%s is less than retryDelay %s", s.MaxRetryDelay.Std(), s.retryDelay())
	}
}

// retryAfter is how long a command that failed failures times in a row
// waits before it is tried again.
func (s *CommandSpec) retryAfter(failures int) time.Duration {
	d, ceiling := s.retryDelay(), cmp.Or(s.MaxRetryDelay.Std(), defaultMaxRetryDelay)
	for i := 1; i < failures && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

func (s *CommandSpec) retryDelay() time.Duration {
	return cmp.Or(s.RetryDelay.Std(), defaultRetryDelay)
}

// Claims: a command holds no path.
func (s *CommandSpec) Claims() []resource.Claim { return nil }

// Watched: its creates, gone, runs it again.
func (s *CommandSpec) Watched() []string {
	if s.Creates == "" {
		return nil
	}
	return []string{s.Creates}
}

// Requires: what refreshes it is applied before it.
func (s *CommandSpec) Requires() []resource.ID { return s.RefreshOn }

func init() {
	Register("Command", func() resource.Spec { return &CommandSpec{} }, commandDriver{})
}

type commandDriver struct{}

// verbs: a command is run, to create and to update alike.
func (commandDriver) verbs() diff.Verbs { return diff.Verbs{Create: diff.Run, Update: diff.Run} }

// commandExtra is what the snapshot keeps of a command's last run.
type commandExtra struct {
	Hash     string    `json:"hash"`             // the effective spec last run
	Inputs   string    `json:"inputs,omitempty"` // Hash without the secrets (effectiveHash)
	OK       bool      `json:"ok"`
	ExitCode int       `json:"exitCode"`
	Output   string    `json:"output,omitempty"`   // the tail
	TimedOut string    `json:"timedOut,omitempty"` // the timeout it ran into
	Time     time.Time `json:"time"`
	// Failures counts the failed runs in a row of this spec; the next
	// run is not tried before NextTry.
	Failures int       `json:"failures,omitempty"`
	NextTry  time.Time `json:"nextTry,omitzero"`
}

// The backoff of a failing command, unless its spec says otherwise
// (retryDelay, maxRetryDelay): the first retry may come after 5s, each
// further one after twice the wait before, up to 10m; a change of its
// spec runs it at once.
const (
	defaultRetryDelay    = 5 * time.Second
	defaultMaxRetryDelay = 10 * time.Minute
)

func commandExtraOf(rec *state.Entry) (commandExtra, bool) {
	var x commandExtra
	if rec == nil || len(rec.Extra) == 0 {
		return x, false
	}
	return x, json.Unmarshal(rec.Extra, &x) == nil
}

func (commandDriver) Observe(ctx context.Context, env *Env, r *resource.Resource, rec *state.Entry) (*diff.Change, error) {
	c := &diff.Change{Health: health.Healthy}
	x, ran := commandExtraOf(rec)
	if ran {
		c.Runtime = &diff.Runtime{LastRun: &x.Time, Outcome: x.outcome(), LogPath: commandLog(env, rec.ID), QuickExits: x.Failures}
		if !x.OK {
			c.Health, c.Detail = health.Degraded, x.outcome()
			if !x.NextTry.IsZero() {
				c.Runtime.NextAttempt = &x.NextTry
			}
			if x.Output != "" {
				c.Runtime.LastOutput = lastLines(x.Output, 10)
			}
		}
	}
	o := &c.Observed
	o.Recorded, o.Exists = rec != nil, ran
	if r == nil {
		// Nothing to undo; its log goes with prune.
		o.Exists = rec != nil && logExists(commandLog(env, rec.ID))
		return c, nil
	}
	spec := r.Spec.(*CommandSpec)
	hash, inputs := x.Hash, x.Inputs // recalled: what last ran is what is desired
	if !env.recalled() {
		var err error
		if hash, inputs, err = effectiveHash(env, r, &spec.Exec, spec.RefreshOn); err != nil {
			return nil, err
		}
		if hash, inputs, err = legacyHash(env, r, &spec.Exec, spec.RefreshOn, hash, inputs, x.Hash); err != nil {
			return nil, err
		}
	}
	o.Desired, o.Ours = true, true
	o.GitChanged = x.Hash != hash
	o.SecretChanged = o.GitChanged && x.Inputs != "" && x.Inputs == inputs
	o.Failed = ran && !x.OK
	o.Matches = ran && x.OK && !o.GitChanged
	if o.Matches && spec.Creates != "" {
		// What it creates is checked on every run, as Ansible's creates
		// is: gone, the command runs again (a stat, so status does it
		// too; a sandbox has the host's word from its export).
		gone := false
		if env.Simulate {
			exists, known := env.Exists[spec.Creates]
			gone = known && !exists
		} else if _, err := env.Root.Lstat(spec.Creates); missing(err) {
			gone = true
		} else if err != nil {
			return nil, fmt.Errorf("creates %s: %w", spec.Creates, err)
		}
		if gone {
			o.Exists, o.Matches = false, false
			c.Health, c.Detail = health.Missing, spec.Creates+" is gone; it creates it"
			return c, nil
		}
	}
	if env.Simulate && !o.Matches && spec.Creates != "" {
		// A sandbox runs no guard; what creates is, the export says.
		if exists, known := env.Exists[spec.Creates]; known && exists {
			o.Exists, o.Matches, o.Failed = true, true, false
			c.Health, c.Detail = health.Healthy, spec.Creates+" exists on the host"
			return c, nil
		} else if !known {
			c.Detail = "runs unless " + spec.Creates + " exists on the host: the export does not say"
		}
	}
	if o.Matches || env.Simulate || env.recalled() {
		return c, nil // guards are not run in a sandbox, nor by status
	}
	skip, why, err := guarded(ctx, env, spec)
	if err != nil {
		return nil, err
	}
	if skip {
		o.Exists, o.Matches, o.Failed = true, true, false
		c.Health, c.Detail = health.Healthy, why
		return c, nil
	}
	if ran && !o.Failed && !o.SecretChanged && rec.SpecHash == specHash(r) {
		o.InputsChanged = true
		c.Detail = inputsChanged(&spec.Exec, spec.RefreshOn, "refreshes on")
	}
	return c, nil
}

// guarded runs the guards: creates, unless, onlyIf.
func guarded(ctx context.Context, env *Env, spec *CommandSpec) (bool, string, error) {
	if spec.Creates != "" {
		if _, err := env.Root.Lstat(spec.Creates); err == nil {
			return true, spec.Creates + " exists", nil
		} else if !missing(err) {
			return false, "", fmt.Errorf("creates %s: %w", spec.Creates, err)
		}
	}
	check := func(argv []string) (bool, error) {
		_, code, err := runCommand(ctx, env, spec, argv, time.Minute)
		return code == 0, err
	}
	if len(spec.Unless) > 0 {
		ok, err := check(spec.Unless)
		if err != nil {
			return false, "", fmt.Errorf("unless: %w", err)
		}
		if ok {
			return true, "unless succeeded", nil
		}
	}
	if len(spec.OnlyIf) > 0 {
		ok, err := check(spec.OnlyIf)
		if err != nil {
			return false, "", fmt.Errorf("onlyIf: %w", err)
		}
		if !ok {
			return true, "onlyIf failed", nil
		}
	}
	return false, "", nil
}

// outcome says how the last run ended, in words.
func (x commandExtra) outcome() string {
	switch {
	case x.TimedOut != "":
		return "timed out after " + x.TimedOut
	case x.ExitCode < 0:
		return "could not run"
	case x.OK:
		return "succeeded"
	}
	return fmt.Sprintf("exit code %d", x.ExitCode)
}

// errTimeout reports a command that ran out of time and was killed.
type errTimeout struct{ after time.Duration }

func (e *errTimeout) Error() string { return fmt.Sprintf("timed out after %s", e.after) }

// errExit reports a command that ran and failed; its output is its tail.
type errExit struct {
	code   int
	output string
}

func (e *errExit) Error() string {
	if e.output == "" {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return fmt.Sprintf("exit code %d: %s", e.code, e.output)
}

// runCommand runs argv with the spec's clean environment, within timeout,
// killing its whole process group when time runs out. err is only for a
// command that could not run at all.
func runCommand(ctx context.Context, env *Env, spec *CommandSpec, argv []string, timeout time.Duration) ([]byte, int, error) {
	uid, gid, home, err := credentials(spec.User)
	if err != nil {
		return nil, -1, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if cmd.Dir, err = workingDir(env, spec.WorkingDir); err != nil {
		return nil, -1, err
	}
	secrets, err := readSecrets(env, spec.SecretEnv)
	if err != nil {
		return nil, -1, err
	}
	fromFile, err := readSecretEnvFile(env, &spec.Exec)
	if err != nil {
		return nil, -1, err
	}
	defer func() { clear(fromFile) }()
	secrets = append(secrets, fromFile...)
	cmd.Env = processEnv(env, spec.Env, home)
	if p, err := supervise.LookPath(argv[0], cmd.Env); err == nil {
		cmd.Path = p
	}
	for _, s := range secrets {
		cmd.Env = append(cmd.Env, s.name+"="+s.value)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if uid >= 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(max(gid, 0))}
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err = cmd.Run()
	// Its output is logged, stored in the snapshot and shown: never with
	// a secret in it.
	out := redactor(secrets).Redact(buf.Bytes())
	var ee *exec.ExitError
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return out, -1, &errTimeout{timeout}
	case errors.As(err, &ee):
		return out, ee.ExitCode(), nil
	case err != nil:
		return out, -1, err
	}
	return out, 0, nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[max(0, len(lines)-n):]
}

// countOf counts in words: "1 failure", "3 failures".
func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func tailOf(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = append([]byte("…"), b[len(b)-n:]...)
	}
	return string(b)
}

func (commandDriver) Apply(ctx context.Context, env *Env, c *diff.Change) (*state.Entry, error) {
	if c.Desired == nil {
		// Pruned: what is left of it is its log.
		// Through the state dir's door: a link planted at logs/ is never
		// followed to remove what it leads to.
		p := commandLogName(c.ID.Name())
		for _, f := range []string{p, p + ".1", p + ".1.tmp"} {
			if err := env.State.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return c.Record, err
			}
		}
		return nil, nil
	}
	if c.Action == diff.NoOp {
		return c.Record, nil
	}
	spec := c.Desired.Spec.(*CommandSpec)
	hash, inputs, err := effectiveHash(env, c.Desired, &spec.Exec, spec.RefreshOn)
	if err != nil {
		return nil, err
	}
	if env.Simulate {
		e := newEntry(c.Desired, "")
		e.Extra, _ = json.Marshal(commandExtra{Hash: hash, Inputs: inputs, OK: true})
		return e, nil
	}
	prev, ran := commandExtraOf(c.Record)
	if ran && !prev.OK && prev.Hash == hash && time.Now().Before(prev.NextTry) {
		// Failing again at full cost on every sync helps nobody: the retry
		// waits for its backoff, or for a change of its spec.
		// What the failure printed still says why: shown until it next succeeds.
		output := ""
		if prev.Output != "" {
			output = "; output: " + tailOf([]byte(prev.Output), 512)
		}
		return c.Record, fmt.Errorf("%s, %s in a row; not tried again before %s (in %s)%s",
			prev.outcome(), countOf(prev.Failures, "failure"), prev.NextTry.UTC().Format(time.RFC3339), time.Until(prev.NextTry).Round(time.Second), output)
	}
	timeout := 5 * time.Minute
	if spec.Timeout > 0 {
		timeout = spec.Timeout.Std()
	}
	out, code, runErr := runCommand(ctx, env, spec, spec.Command, timeout)
	appendLog(env, c.Desired.Metadata.Name, spec.Command, out, code, runErr)
	x := commandExtra{Hash: hash, Inputs: inputs, OK: runErr == nil && code == 0, ExitCode: code, Output: tailOf(out, 2048), Time: time.Now().UTC()}
	if !x.OK {
		x.Failures = 1
		if ran && !prev.OK && prev.Hash == hash {
			x.Failures = prev.Failures + 1
		}
		x.NextTry = x.Time.Add(spec.retryAfter(x.Failures))
	}
	var te *errTimeout
	if errors.As(runErr, &te) {
		x.TimedOut = te.after.String()
	}
	e := newEntry(c.Desired, "")
	e.Created = true
	e.Extra, _ = json.Marshal(x)
	switch {
	case runErr != nil && len(out) == 0:
		return e, runErr
	case runErr != nil:
		return e, fmt.Errorf("%w; output: %s", runErr, tailOf(out, 512))
	case code != 0:
		return e, &errExit{code: code, output: tailOf(out, 512)}
	}
	return e, nil
}

// commandLog is where a command's runs are logged.
func commandLog(env *Env, id string) string {
	return commandLogFile(env.State.Path(), resource.ID(id).Name())
}

func commandLogFile(stateDir, name string) string {
	return filepath.Join(stateDir, commandLogName(name))
}

// commandLogName is a command's log in the state dir.
func commandLogName(name string) string { return "logs/command-" + name + ".log" }

// appendLog keeps every run's output in stateDir/logs/command-<name>.log,
// written through the state dir's door (no symlink there is followed).
func appendLog(env *Env, name string, argv []string, out []byte, code int, err error) {
	p := commandLogName(name)
	env.State.CapLog(p, supervise.DefaultLogMax) // capped like a process's log
	f, ferr := env.State.OpenLog(p)
	if ferr != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "== %s %q\n%s", time.Now().UTC().Format(time.RFC3339), argv, out)
	if err != nil {
		fmt.Fprintf(f, "== could not run: %v\n", err)
	} else {
		fmt.Fprintf(f, "== exit code %d\n", code)
	}
}
