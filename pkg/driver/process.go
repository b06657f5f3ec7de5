package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/user"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// ProcessSpec is a supervised process's desired state.
type ProcessSpec struct {
	resource.Base  `yaml:",inline"`
	Exec           `yaml:",inline"`
	RestartPolicy  string            `yaml:"restartPolicy" json:"restartPolicy,omitempty"` // Always (default), OnFailure, Never
	StopSignal     string            `yaml:"stopSignal" json:"stopSignal,omitempty"`       // default SIGTERM
	StopTimeout    resource.Duration `yaml:"stopTimeout" json:"stopTimeout,omitempty"`     // default 10s
	LivenessProbe  *health.Probe     `yaml:"livenessProbe" json:"livenessProbe,omitempty"`
	ReadinessProbe *health.Probe     `yaml:"readinessProbe" json:"readinessProbe,omitempty"`
	// RestartOn names resources whose change restarts the process.
	RestartOn []resource.ID `yaml:"restartOn" json:"restartOn,omitempty"`
}

// Exec is how a program runs; Process and Command share it.
type Exec struct {
	Command    []string          `yaml:"command" json:"command"`
	Env        map[string]string `yaml:"env" json:"env,omitempty"`
	WorkingDir string            `yaml:"workingDir" json:"workingDir,omitempty"`
	User       string            `yaml:"user" json:"user,omitempty"` // when cortex-sync runs as root
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (x *Exec) validate(v *resource.Validation) {
	validateCommand(v, "spec.command", x.Command)
	for k := range x.Env {
		if !envName.MatchString(k) {
			v.Errorf("spec.env."+k, "%q is not a valid environment variable name", k)
		}
	}
	if x.WorkingDir != "" && !path.IsAbs(x.WorkingDir) {
		v.Errorf("spec.workingDir", "%q must be an absolute path", x.WorkingDir)
	}
}

// Validate checks the Process's fields.
func (s *ProcessSpec) Validate(v *resource.Validation) {
	s.Exec.validate(v)
	if s.RestartPolicy != "" {
		v.OneOf("spec.restartPolicy", s.RestartPolicy, "Always", "OnFailure", "Never")
	}
	if s.StopSignal != "" && unix.SignalNum(signalName(s.StopSignal)) == 0 {
		v.Errorf("spec.stopSignal", "%q is not a signal; write one such as SIGTERM or SIGINT", s.StopSignal)
	}
	if s.LivenessProbe != nil {
		s.LivenessProbe.Validate(v, "spec.livenessProbe")
	}
	if s.ReadinessProbe != nil {
		s.ReadinessProbe.Validate(v, "spec.readinessProbe")
	}
}

func validateCommand(v *resource.Validation, field string, argv []string) {
	if len(argv) == 0 || argv[0] == "" {
		v.Errorf(field, "is required: the program and its arguments, as a list")
	}
}

func signalName(s string) string {
	if !strings.HasPrefix(s, "SIG") {
		return "SIG" + s
	}
	return s
}

// Claims: a process holds no path.
func (s *ProcessSpec) Claims() []resource.Claim { return nil }

// Requires: what restarts it is applied before it.
func (s *ProcessSpec) Requires() []resource.ID { return s.RestartOn }

func init() {
	Register("Process", func() resource.Spec { return &ProcessSpec{} }, processDriver{})
}

type processDriver struct{}

// verbs: a process is started, and restarted to change.
func (processDriver) verbs() diff.Verbs { return diff.Verbs{Create: diff.Create, Update: diff.Restart} }

// processExtra is what the snapshot keeps of a process.
type processExtra struct {
	Shim    supervise.Identity `json:"shim"`
	Process supervise.Identity `json:"process"`
	// Hash is the effective spec last started: the spec and the desired
	// state of everything it restarts on. A restart owed is never lost:
	// it is owed until a process with the new hash runs.
	Hash string `json:"hash"`
	// How to stop it, kept for when its manifest is gone (prune).
	StopSignal  syscall.Signal `json:"stopSignal,omitempty"`
	StopTimeout time.Duration  `json:"stopTimeout,omitempty"`
}

func extraOf(rec *state.Entry) processExtra {
	var x processExtra
	if rec != nil && len(rec.Extra) > 0 {
		json.Unmarshal(rec.Extra, &x)
	}
	return x
}

// effectiveHash names a spec together with the desired state of the
// resources it restarts (or refreshes) on.
func effectiveHash(env *Env, r *resource.Resource, on []resource.ID) (string, error) {
	h := sha256.New()
	h.Write([]byte(specHash(r)))
	for _, id := range on {
		target := env.Set.Get(id)
		if target == nil {
			continue
		}
		d, err := desiredDigest(env, target)
		if err != nil {
			return "", fmt.Errorf("%s: %w", id, err)
		}
		fmt.Fprintf(h, "\n%s=%s", id, d)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// live is what the shim's status says, trusted only while the shim is the
// one recorded (or the one the status file names, when nothing is).
type live struct {
	status  *supervise.Status
	running bool // the shim runs and supervises the process
	orphan  bool // the shim is gone but the process it ran still runs
}

func observeProcess(env *Env, name string, x processExtra) (live, error) {
	_, statusFile := supervise.Files(env.State.Path, name)
	st, err := supervise.ReadStatus(statusFile)
	if err != nil {
		return live{}, fmt.Errorf("read %s: %w", statusFile, err)
	}
	l := live{status: st}
	if st == nil {
		return l, nil
	}
	if x.Shim.PID != 0 && st.Shim != x.Shim {
		// The status file belongs to another shim than recorded: trust
		// neither over the recorded identities.
		st.Shim, st.Process = x.Shim, x.Process
	}
	l.running = st.Shim.Alive() && (st.State == supervise.Running || st.State == supervise.Backoff)
	l.orphan = !l.running && st.Process.Alive()
	return l, nil
}

// describe says what the status means for health, and in words.
func describe(l live, spec *ProcessSpec) (health.Status, string) {
	st := l.status
	restarts := ""
	if st != nil && st.Restarts == 1 {
		restarts = ", 1 restart"
	} else if st != nil && st.Restarts > 1 {
		restarts = fmt.Sprintf(", %d restarts", st.Restarts)
	}
	switch {
	case st == nil:
		return health.Missing, "not started"
	case !l.running && st.State == supervise.Exited && !st.LastExit.Failed() && spec != nil && spec.RestartPolicy != "Always":
		return health.Healthy, "completed" + restarts
	case !l.running:
		how := "its supervisor is gone"
		if st.LastExit != nil {
			how = st.LastExit.String()
		}
		return health.Degraded, "not running: " + how + restarts
	case st.State == supervise.Backoff:
		when := "now"
		if d := time.Until(st.NextRestart); d > 0 {
			when = "in " + d.Round(100*time.Millisecond).String()
		}
		return health.Degraded, fmt.Sprintf("crash loop: %s; restarting %s%s", st.LastExit, when, restarts)
	case st.Message != "":
		return health.Degraded, st.Message + restarts
	case !st.Ready:
		return health.Progressing, "running, not ready yet" + restarts
	}
	d := fmt.Sprintf("running as pid %d", st.Process.PID)
	if st.LastExit != nil {
		d += fmt.Sprintf(", last %s", st.LastExit)
	}
	return health.Healthy, d + restarts
}

func (processDriver) Observe(ctx context.Context, env *Env, r *resource.Resource, rec *state.Entry) (*diff.Change, error) {
	id := resource.ID("")
	if r != nil {
		id = r.ID()
	} else {
		id = resource.ID(rec.ID)
	}
	x := extraOf(rec)
	l, err := observeProcess(env, id.Name(), x)
	if err != nil {
		return nil, err
	}
	if env.Simulate {
		l = live{running: rec != nil, status: &supervise.Status{State: supervise.Running, Ready: true}}
	}
	c := &diff.Change{Work: l}
	var spec *ProcessSpec
	if r != nil {
		spec = r.Spec.(*ProcessSpec)
	}
	c.Health, c.Detail = describe(l, spec)
	c.Runtime = runtimeOf(env, id.Name(), l.status)
	o := &c.Observed
	o.Recorded = rec != nil
	o.Exists = l.running || l.orphan
	if r == nil {
		return c, nil
	}
	o.Desired, o.Ours = true, true
	hash := x.Hash // recalled: the effective spec last started is the desired one
	if !env.recalled() {
		if hash, err = effectiveHash(env, r, spec.RestartOn); err != nil {
			return nil, err
		}
	}
	completed := l.status != nil && l.status.State == supervise.Exited && !l.status.LastExit.Failed() && spec.RestartPolicy != "Always"
	o.Exists = l.running || completed
	o.Crashed = rec != nil && !o.Exists
	o.GitChanged = x.Hash != hash
	o.Matches = !o.GitChanged
	if o.GitChanged && rec != nil && rec.SpecHash == specHash(r) {
		c.Detail = "a resource it restarts on changed"
	}
	return c, nil
}

func (processDriver) Apply(ctx context.Context, env *Env, c *diff.Change) (*state.Entry, error) {
	l, _ := c.Work.(live) // the zero value when nothing was observed (a simulation)
	var spec *ProcessSpec
	stopSig, stopTimeout := syscall.SIGTERM, 10*time.Second
	if x := extraOf(c.Record); x.StopSignal != 0 {
		stopSig, stopTimeout = x.StopSignal, x.StopTimeout // as recorded, for a prune
	}
	if c.Desired != nil {
		spec = c.Desired.Spec.(*ProcessSpec)
		if spec.StopSignal != "" {
			stopSig = unix.SignalNum(signalName(spec.StopSignal))
		}
		if spec.StopTimeout > 0 {
			stopTimeout = spec.StopTimeout.Std()
		}
	}
	switch c.Action {
	case diff.Delete:
		if env.Simulate {
			return nil, nil
		}
		return nil, supervise.Stop(l.status, stopSig, stopTimeout)
	case diff.NoOp:
		return c.Record, nil
	}
	hash, err := effectiveHash(env, c.Desired, spec.RestartOn)
	if err != nil {
		return nil, err
	}
	if env.Simulate {
		e := newEntry(c.Desired, "")
		e.Extra, _ = json.Marshal(processExtra{Hash: hash})
		return e, nil
	}
	if err := supervise.Stop(l.status, stopSig, stopTimeout); err != nil {
		return nil, err
	}
	s, err := shimSpec(env, c.Desired, spec, hash, stopSig, stopTimeout)
	if err != nil {
		return nil, err
	}
	st, err := supervise.Start(s)
	if err != nil {
		return nil, err
	}
	if st.State == supervise.Backoff && st.Process.PID == 0 && st.Restarts == 0 && strings.HasPrefix(st.LastExit.Reason, "cannot start") {
		supervise.Stop(st, stopSig, stopTimeout) // it never ran: do not retry a command that is not there
		return nil, fmt.Errorf("%s", st.LastExit.Reason)
	}
	e := newEntry(c.Desired, "")
	e.Created = true
	e.Extra, _ = json.Marshal(processExtra{Shim: st.Shim, Process: st.Process, Hash: hash, StopSignal: stopSig, StopTimeout: stopTimeout})
	return e, nil
}

// runtimeOf is what status shows of a process's supervisor's report.
func runtimeOf(env *Env, name string, st *supervise.Status) *diff.Runtime {
	logFile, _ := supervise.Files(env.State.Path, name)
	rt := &diff.Runtime{LogPath: logFile}
	if st == nil {
		return rt
	}
	rt.State, rt.Restarts = st.State, st.Restarts
	if st.Process.Alive() {
		rt.PID = st.Process.PID
	}
	if e := st.LastExit; e != nil {
		rt.LastExit = &diff.Exit{Code: e.Code, Signal: e.Signal, Reason: e.Reason, Time: e.Time}
	}
	return rt
}

// health is a recorded process's live health, for waiting on readiness.
func (processDriver) health(ctx context.Context, env *Env, rec *state.Entry) health.Report {
	l, err := observeProcess(env, resource.ID(rec.ID).Name(), extraOf(rec))
	if err != nil {
		return health.Report{Sync: health.OutOfSync, Health: health.Unknown, Reason: err.Error()}
	}
	h, d := describe(l, nil)
	return health.Report{Health: h, Reason: d}
}

// shimSpec turns a Process into what its shim runs.
func shimSpec(env *Env, r *resource.Resource, spec *ProcessSpec, hash string, stopSig syscall.Signal, stopTimeout time.Duration) (supervise.Spec, error) {
	uid, gid, home, err := credentials(spec.User)
	if err != nil {
		return supervise.Spec{}, err
	}
	dir, err := workingDir(env, spec.WorkingDir)
	if err != nil {
		return supervise.Spec{}, err
	}
	logFile, statusFile := supervise.Files(env.State.Path, r.Metadata.Name)
	policy := spec.RestartPolicy
	if policy == "" {
		policy = "Always"
	}
	return supervise.Spec{
		ID: string(r.ID()), Command: spec.Command, Env: processEnv(env, spec.Env, home), Dir: dir,
		UID: uid, GID: gid, RestartPolicy: policy, StopSignal: stopSig, StopTimeout: stopTimeout,
		Liveness: spec.LivenessProbe, Readiness: spec.ReadinessProbe,
		LogFile: logFile, LogMax: 10 << 20, StatusFile: statusFile, Hash: hash,
	}, nil
}

// workingDir resolves a spec's working directory under --root, as every
// host path a spec names is, to where it really is on the host; "" stays
// "" (the program starts in /).
func workingDir(env *Env, p string) (string, error) {
	if p == "" {
		return "", nil
	}
	d, err := env.Root.OpenDir(p)
	if missing(err) {
		if env.Root.Dir() != "/" {
			return "", fmt.Errorf("working directory %s does not exist (under --root %s)", p, env.Root.Dir())
		}
		return "", fmt.Errorf("working directory %s does not exist", p)
	}
	if err != nil {
		return "", fmt.Errorf("working directory %s: %w", p, err)
	}
	defer d.Close()
	return filepath.Join(env.Root.Dir(), d.Path()), nil
}

// credentials resolves a user to run as: managed only as root.
func credentials(name string) (uid, gid int, home string, err error) {
	uid, gid, home = -1, -1, "/root"
	if u, err := user.Current(); err == nil {
		home = u.HomeDir
	}
	if name == "" || syscall.Geteuid() != 0 {
		return uid, gid, home, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		if _, nerr := strconv.Atoi(name); nerr == nil {
			u, err = user.LookupId(name)
		}
		if err != nil {
			return 0, 0, "", fmt.Errorf("user %q: %w", name, err)
		}
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid, u.HomeDir, nil
}

// processEnv is a clean environment: a standard PATH, HOME and
// CORTEX_SYNC_ROOT, then the spec's own, never the caller's; so a sync from
// a shell and the agent run a spec the same way.
func processEnv(env *Env, extra map[string]string, home string) []string {
	vars := map[string]string{
		"PATH":             "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME":             home,
		"CORTEX_SYNC_ROOT": env.Root.Dir(),
	}
	for k, v := range extra {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
