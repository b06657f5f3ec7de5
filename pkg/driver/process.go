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
	resource.Base `yaml:",inline"`
	Exec          `yaml:",inline"`
	// RestartPolicy: Always (the default), OnFailure, Never.
	RestartPolicy supervise.RestartPolicy `yaml:"restartPolicy" json:"restartPolicy,omitempty"`
	StopSignal    string                  `yaml:"stopSignal" json:"stopSignal,omitempty"`   // default SIGTERM
	StopTimeout   resource.Duration       `yaml:"stopTimeout" json:"stopTimeout,omitempty"` // default 10s
	// MinUptime: a run at least this long (default 10s) is restarted at
	// once; a shorter one is a quick failure, restarted after RestartDelay
	// (default 1s), doubling up to MaxRestartDelay (default 1m), until
	// StartLimit (default 5) quick failures in a row make it Failed.
	MinUptime       resource.Duration `yaml:"minUptime" json:"minUptime,omitempty"`
	RestartDelay    resource.Duration `yaml:"restartDelay" json:"restartDelay,omitempty"`
	MaxRestartDelay resource.Duration `yaml:"maxRestartDelay" json:"maxRestartDelay,omitempty"`
	StartLimit      int               `yaml:"startLimit" json:"startLimit,omitempty"`
	// Resources are limits, applied in the process's cgroup where the
	// controllers are available.
	Resources      *ProcessResources `yaml:"resources" json:"resources,omitempty"`
	LivenessProbe  *health.Probe     `yaml:"livenessProbe" json:"livenessProbe,omitempty"`
	ReadinessProbe *health.Probe     `yaml:"readinessProbe" json:"readinessProbe,omitempty"`
	// RestartOn names resources whose change restarts the process.
	RestartOn []resource.ID `yaml:"restartOn" json:"restartOn,omitempty"`
	// Singleton: in a fleet, the process runs on one host at a time, of
	// those whose desired set has it (an election in etcd, fenced by the
	// supervisor: docs/fleet.md). On a host in no fleet it never runs.
	Singleton bool `yaml:"singleton" json:"singleton,omitempty"`
}

// IsSingleton reports whether the process runs on one host of a fleet at
// a time.
func (s *ProcessSpec) IsSingleton() bool { return s.Singleton }

// ProcessResources limit a process's cgroup.
type ProcessResources struct {
	Memory string `yaml:"memory" json:"memory,omitempty"` // bytes, or with a suffix: 512Mi, 1G (memory.max)
	CPU    string `yaml:"cpu" json:"cpu,omitempty"`       // cores: 0.5, 2, 500m (cpu.max)
	Tasks  int64  `yaml:"tasks" json:"tasks,omitempty"`   // processes and threads (pids.max)
}

// limits turns the resources into what the supervisor applies.
func (r *ProcessResources) limits() (supervise.Resources, error) {
	var out supervise.Resources
	if r == nil {
		return out, nil
	}
	var err error
	if r.Memory != "" {
		if out.Memory, err = parseBytes(r.Memory); err != nil {
			return out, fmt.Errorf("memory: %w", err)
		}
	}
	if r.CPU != "" {
		if out.MilliCPU, err = parseMilliCPU(r.CPU); err != nil {
			return out, fmt.Errorf("cpu: %w", err)
		}
	}
	if r.Tasks < 0 {
		return out, fmt.Errorf("tasks: %d must be positive", r.Tasks)
	}
	out.Tasks = r.Tasks
	return out, nil
}

// parseBytes reads 1048576, 512Ki, 512Mi, 2Gi, 500K, 500M, 1G.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	num, mult := s, int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a size; write one such as 512Mi or 1G", s)
	}
	return n * mult, nil
}

// parseMilliCPU reads cores as 0.5, 2 or 500m.
func parseMilliCPU(s string) (int64, error) {
	bad := fmt.Errorf("%q is not a CPU quantity; write cores such as 0.5, 2 or 500m", s)
	if m, ok := strings.CutSuffix(s, "m"); ok {
		n, err := strconv.ParseInt(m, 10, 64)
		if err != nil || n <= 0 {
			return 0, bad
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || f > 1e6 {
		return 0, bad
	}
	return max(1, int64(f*1000+0.5)), nil
}

// Exec is how a program runs; Process and Command share it.
type Exec struct {
	Command    []string          `yaml:"command" json:"command"`
	Env        map[string]string `yaml:"env" json:"env,omitempty"`
	WorkingDir string            `yaml:"workingDir" json:"workingDir,omitempty"`
	User       string            `yaml:"user" json:"user,omitempty"` // when cortex-sync runs as root
	// SecretEnv maps environment variables to host files (absolute, under
	// --root) whose content is the value, read as the program starts
	// (like systemd's LoadCredential; one trailing newline dropped). The
	// values never enter the plan, the snapshot or the logs: output that
	// shows one is stored and shown as [redacted:NAME]. A change of a
	// file's content restarts the Process (re-runs the Command).
	SecretEnv map[string]string `yaml:"secretEnv" json:"secretEnv,omitempty"`
	// SecretEnvFile is a SOPS dotenv file of the repository whose
	// variables are secrets as secretEnv's are (decrypt: sops).
	SecretEnvFile *SecretEnvFile `yaml:"secretEnvFile" json:"secretEnvFile,omitempty"`
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnv are the variables cortex-sync sets itself.
var reservedEnv = map[string]bool{"PATH": true, "HOME": true, "CORTEX_SYNC_ROOT": true, "CORTEX_SYNC_UNIT": true}

func (x *Exec) validate(v *resource.Validation) {
	x.substitute(v)
	validateCommand(v, "spec.command", x.Command)
	for k := range x.Env {
		if !envName.MatchString(k) {
			v.Errorf("spec.env."+k, "%q is not a valid environment variable name", k)
		}
	}
	for k, p := range x.SecretEnv {
		field := secretField(k)
		switch _, dup := x.Env[k]; {
		case !envName.MatchString(k):
			v.Errorf(field, "%q is not a valid environment variable name", k)
		case dup:
			v.Errorf(field, "%s is also in spec.env; give it in one of them", k)
		case reservedEnv[k]:
			v.Errorf(field, "%s is set by cortex-sync; choose another name", k)
		default:
			v.AbsPath(field, p)
		}
	}
	x.SecretEnvFile.validate(v)
	if x.WorkingDir != "" && !path.IsAbs(x.WorkingDir) {
		v.Errorf("spec.workingDir", "%q must be an absolute path", x.WorkingDir)
	}
}

// Validate checks the Process's fields.
func (s *ProcessSpec) Validate(v *resource.Validation) {
	s.Exec.validate(v)
	if s.RestartPolicy != "" {
		v.OneOf("spec.restartPolicy", string(s.RestartPolicy), supervise.RestartPolicies...)
	}
	if s.StartLimit < 0 {
		v.Errorf("spec.startLimit", "%d must be positive", s.StartLimit)
	}
	if s.MaxRestartDelay > 0 && s.MaxRestartDelay < s.RestartDelay {
		v.Errorf("spec.maxRestartDelay", "%s is less than restartDelay %s", s.MaxRestartDelay.Std(), s.RestartDelay.Std())
	}
	if _, err := s.Resources.limits(); err != nil {
		v.Errorf("spec.resources", "%v", err)
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
	// Inputs is Hash without the secrets' content (see effectiveHash).
	Inputs string `json:"inputs,omitempty"`
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
// resources it restarts (or refreshes) on and the content of its secretEnv
// files; inputs names the same without the secrets, so that a change of
// theirs alone is told apart. inputs is "" without secretEnv.
func effectiveHash(env *Env, r *resource.Resource, x *Exec, on []resource.ID) (hash, inputs string, err error) {
	secrets, err := secretsDigest(env, x.SecretEnv)
	if err != nil {
		return "", "", err
	}
	fromFile, err := secretEnvFileDigest(env, x)
	if err != nil {
		return "", "", err
	}
	// A secretEnvFile is in Git: a change of its plaintext is a change in
	// Git, so it is in inputs too.
	if hash, err = inputsHash(env, r, secrets+fromFile, on); err != nil || len(x.SecretEnv) == 0 {
		return hash, "", err
	}
	inputs, err = inputsHash(env, r, fromFile, on)
	return hash, inputs, err
}

// legacyHash is the effective hash as an older cortex-sync named content
// (see source.LegacyTree), when that is what last ran (ran) and the hash
// of now is not: the same inputs are no restart. Else it is hash.
func legacyHash(env *Env, r *resource.Resource, x *Exec, on []resource.ID, hash, inputs, ran string) (string, string, error) {
	if ran == "" || ran == hash || len(on) == 0 {
		return hash, inputs, nil
	}
	old := *env
	old.legacyIDs = true
	h, i, err := effectiveHash(&old, r, x, on)
	if err != nil || h != ran {
		return hash, inputs, err
	}
	return h, i, nil
}

func inputsHash(env *Env, r *resource.Resource, secrets string, on []resource.ID) (string, error) {
	h := sha256.New()
	h.Write([]byte(specHash(r)))
	h.Write([]byte(secrets))
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

// inputsChanged says why the effective spec changed when the spec did
// not: what `restartOn` (or `refreshOn`, said by verb) names, or the content
// of a secretEnv file. The snapshot keeps one hash of both, so with both
// in use either may be the cause.
func inputsChanged(x *Exec, on []resource.ID, verb string) string {
	switch {
	case x.SecretEnvFile != nil && len(on) == 0 && len(x.SecretEnv) == 0:
		return "the plaintext of its secretEnvFile changed"
	case !x.hasSecrets():
		return "a resource it " + verb + " changed"
	case len(on) == 0:
		return "a secretEnv file changed"
	default:
		return "a resource it " + verb + ", or a secretEnv file, changed"
	}
}

// live is what the status file says of a process. The status is the
// truth of what runs: the snapshot may lag behind it (a sync killed after
// starting a process and before saving).
type live struct {
	status     *supervise.Status
	supervised bool   // the supervisor that wrote the status runs and looks after it
	alive      bool   // the process the status names runs
	hash       string // the desired effective spec, when observed from one
	inputs     string // hash without the secrets (effectiveHash)
}

func observeProcess(env *Env, name string) (live, error) {
	st, err := supervise.Read(env.State.Path(), name)
	if err != nil {
		return live{}, fmt.Errorf("read the status of %s: %w", name, err)
	}
	l := live{status: st}
	if st != nil {
		l.supervised = st.Supervised()
		l.alive = st.Process.Alive()
	}
	return l, nil
}

// describe says what the status means for health, and in words.
func describe(l live, policy supervise.RestartPolicy, id resource.ID) (health.Status, string) {
	st := l.status
	if st == nil {
		return health.Missing, "not started"
	}
	restarts := ""
	if st.Restarts == 1 {
		restarts = ", 1 restart"
	} else if st.Restarts > 1 {
		restarts = fmt.Sprintf(", %d restarts", st.Restarts)
	}
	switch {
	case st.State == supervise.Standby && st.NoFence && l.supervised:
		return health.Degraded, "not running: a singleton runs only on the fleet host that holds it, and no agent of a fleet runs here; run the agent with --etcd-endpoints and --fleet"
	case st.State == supervise.Standby && l.supervised:
		return health.Healthy, "standby: " + st.Message
	case st.State == supervise.Held:
		return health.Suspended, fmt.Sprintf("stopped by the operator; cortex-sync start %s starts it again", id)
	case st.State == supervise.Failed && st.StartError != "":
		return health.Degraded, "failed: cannot start: " + st.StartError
	case st.State == supervise.Failed:
		return health.Degraded, fmt.Sprintf("failed: %s, %d quick failures in a row%s; fix it, then change its spec or run cortex-sync restart %s", st.LastExit, st.QuickExits, restarts, id)
	case st.State == supervise.Exited && !st.LastExit.Failed() && policy.OrDefault() != supervise.Always:
		return health.Healthy, "completed" + restarts
	case st.State == supervise.Exited && !policy.Restarts(st.LastExit):
		return health.Degraded, fmt.Sprintf("not running: %s%s; restartPolicy %s leaves it down until its spec changes or cortex-sync restart %s", st.LastExit, restarts, policy.OrDefault(), id)
	case !l.supervised && l.alive:
		return health.Degraded, fmt.Sprintf("unsupervised: its supervisor is gone; pid %d still runs, and the next sync adopts it", st.Process.PID)
	case !l.supervised:
		how := "its supervisor is gone"
		if st.LastExit != nil && (st.State.Final() || !st.Process.Alive() && st.Process.PID == 0) {
			how = st.LastExit.String()
		}
		return health.Degraded, "not running: " + how + restarts
	case st.State == supervise.BackingOff:
		when := "now"
		if d := time.Until(st.NextRestart); d > 0 {
			when = "in " + d.Round(100*time.Millisecond).String()
		}
		return health.Degraded, fmt.Sprintf("crash loop: %s; restarting %s (quick failure %d)%s", st.LastExit, when, st.QuickExits, restarts)
	case st.State == supervise.Starting:
		return health.Progressing, "starting" + restarts
	case st.Message != "":
		return health.Degraded, st.Message + restarts
	case !st.Ready:
		d := "running, not ready yet"
		if st.Probe != "" {
			d += ": " + st.Probe
		}
		return health.Progressing, d + restarts
	}
	d := fmt.Sprintf("running as pid %d", st.Process.PID)
	if st.LastExit != nil {
		d += fmt.Sprintf(", last %s", st.LastExit)
	}
	return health.Healthy, d + restarts
}

func (processDriver) Observe(ctx context.Context, env *Env, r *resource.Resource, rec *state.Entry) (*diff.Change, error) {
	var id resource.ID
	if r != nil {
		id = r.ID()
	} else {
		id = resource.ID(rec.ID)
	}
	x := extraOf(rec)
	l, err := observeProcess(env, id.Name())
	if err != nil {
		return nil, err
	}
	if env.Simulate {
		l = live{supervised: rec != nil, alive: rec != nil, status: &supervise.Status{State: supervise.Running, Ready: true, Hash: x.Hash}}
	}
	var spec *ProcessSpec
	policy := supervise.DefaultRestartPolicy
	if r != nil {
		spec = r.Spec.(*ProcessSpec)
		policy = spec.RestartPolicy
	}
	c := &diff.Change{}
	c.Health, c.Detail = describe(l, policy, id)
	c.Runtime = runtimeOf(env, id.Name(), l.status, c.Health)
	o := &c.Observed
	o.Recorded = rec != nil
	st := l.status
	if r == nil {
		// Left Git: whatever of it is on the host, its process or only
		// its files, goes with prune.
		o.Exists = st != nil || l.alive
		c.Work = l
		return c, nil
	}
	o.Desired, o.Ours = true, true
	hash, inputs := x.Hash, x.Inputs // recalled: the effective spec last started is the desired one
	if !env.recalled() {
		if hash, inputs, err = effectiveHash(env, r, &spec.Exec, spec.RestartOn); err != nil {
			return nil, err
		}
		ran := x.Hash
		if l.status != nil {
			ran = l.status.Hash
		}
		if hash, inputs, err = legacyHash(env, r, &spec.Exec, spec.RestartOn, hash, inputs, ran); err != nil {
			return nil, err
		}
	}
	l.hash, l.inputs = hash, inputs
	c.Work = l
	running := x.Hash // what runs: the status's word over the snapshot's
	if st != nil {
		running = st.Hash
	}
	o.GitChanged = x.Hash != hash
	o.SecretChanged = o.GitChanged && x.Inputs != "" && x.Inputs == inputs
	o.Matches = running == hash
	switch {
	case st == nil:
	case st.State == supervise.Held:
		o.Exists, o.Held = true, true
	case l.supervised:
		o.Exists = true
	case l.alive:
		// It runs, unsupervised: the next supervisor adopts it.
		o.Exists, o.Unsupervised = true, true
		o.Attrs = []diff.Attr{{Field: "supervisor", Before: "gone", After: "adopts pid " + strconv.Itoa(st.Process.PID)}}
	case st.State == supervise.Failed && st.StartError == "":
		o.Exists = true // final until its spec changes or an operator restarts it
	case st.State == supervise.Exited && !policy.Restarts(st.LastExit):
		// Its restart policy leaves it down: completed, or, with Never,
		// ended whatever way. Automatic restarts are its supervisor's
		// call, not a sync's nor the agent's: neither outruns its
		// policy (nor its backoff). A new spec or cortex-sync restart
		// starts it again.
		o.Exists = true
	}
	o.Crashed = rec != nil && !o.Exists
	if o.GitChanged && !o.SecretChanged && rec != nil && rec.SpecHash == specHash(r) {
		o.InputsChanged = true
		c.Detail = inputsChanged(&spec.Exec, spec.RestartOn, "restarts on")
	}
	return c, nil
}

// stateFiles: the supervisor's status file says how the process runs.
func (processDriver) stateFiles(env *Env, r *resource.Resource) []string {
	_, status := supervise.Files(env.State.Path(), r.ID().Name())
	return []string{status}
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
		stopSig, stopTimeout = spec.stop()
	}
	name := c.ID.Name()
	switch c.Action {
	case diff.Delete:
		if env.Simulate {
			return nil, nil
		}
		return nil, supervise.Remove(env.State.Path(), name, stopSig, stopTimeout)
	case diff.NoOp:
		// What runs is what is desired: record it as the status says,
		// should the snapshot lag behind.
		e := c.Record
		if st := l.status; st != nil && c.Desired != nil && !env.Simulate && l.hash != "" {
			e = newEntry(c.Desired, "")
			if c.Record != nil {
				cp := *c.Record
				e = &cp
			}
			e.Created = true
			e.Extra, _ = json.Marshal(processExtra{Shim: st.Shim, Process: st.Process, Hash: l.hash, Inputs: l.inputs, StopSignal: stopSig, StopTimeout: stopTimeout})
		}
		return e, nil
	}
	hash, inputs, err := effectiveHash(env, c.Desired, &spec.Exec, spec.RestartOn)
	if err != nil {
		return nil, err
	}
	if env.Simulate {
		e := newEntry(c.Desired, "")
		e.Extra, _ = json.Marshal(processExtra{Hash: hash, Inputs: inputs})
		return e, nil
	}
	s, err := shimSpec(env, c.Desired, spec, hash)
	if err != nil {
		return nil, err
	}
	st, err := supervise.Run(env.State.Path(), s)
	if err != nil {
		return nil, err
	}
	if st.StartError != "" {
		// It never ran: nothing is left to retry a program that is not
		// there; the next sync tries again.
		supervise.Remove(env.State.Path(), name, stopSig, stopTimeout)
		return nil, fmt.Errorf("cannot start: %s", st.StartError)
	}
	e := newEntry(c.Desired, "")
	e.Created = true
	e.Extra, _ = json.Marshal(processExtra{Shim: st.Shim, Process: st.Process, Hash: hash, Inputs: inputs, StopSignal: stopSig, StopTimeout: stopTimeout})
	return e, nil
}

// stop is how the process is stopped: its signal and timeout.
func (s *ProcessSpec) stop() (syscall.Signal, time.Duration) {
	sig, timeout := syscall.SIGTERM, 10*time.Second
	if s.StopSignal != "" {
		sig = unix.SignalNum(signalName(s.StopSignal))
	}
	if s.StopTimeout > 0 {
		timeout = s.StopTimeout.Std()
	}
	return sig, timeout
}

// runtimeOf is what status shows of a process's supervisor's report: its
// state, pid, restarts, the next attempt, how it is contained, and for one
// that is Degraded, the last lines of its output.
func runtimeOf(env *Env, name string, st *supervise.Status, h health.Status) *diff.Runtime {
	logFile, _ := supervise.Files(env.State.Path(), name)
	rt := &diff.Runtime{LogPath: logFile}
	if st == nil {
		return rt
	}
	rt.State, rt.Restarts, rt.QuickExits, rt.Containment = string(st.State), st.Restarts, st.QuickExits, st.Containment
	if st.Process.Alive() {
		rt.PID = st.Process.PID
	}
	if !st.NextRestart.IsZero() && st.State == supervise.BackingOff {
		t := st.NextRestart
		rt.NextAttempt = &t
	}
	if e := st.LastExit; e != nil {
		rt.LastExit = &diff.Exit{Code: e.Code, Signal: e.Signal, Reason: e.Reason, Time: e.Time}
	}
	if h == health.Degraded {
		rt.LastOutput, _ = supervise.Tail(logFile, 10)
	}
	return rt
}

// health is a recorded process's live health, for waiting on readiness.
func (processDriver) health(ctx context.Context, env *Env, rec *state.Entry) health.Report {
	id := resource.ID(rec.ID)
	l, err := observeProcess(env, id.Name())
	if err != nil {
		return health.Report{Sync: health.OutOfSync, Health: health.Unknown, Reason: err.Error()}
	}
	var spec ProcessSpec
	json.Unmarshal(rec.Spec, &spec)
	h, d := describe(l, spec.RestartPolicy, id)
	rep := health.Report{Health: h, Reason: d, Stuck: h == health.Degraded && stuck(l.status)}
	if st := l.status; st != nil {
		// The quick failures in a row of this spec's runs (a new spec
		// starts at 0), whatever the state it is seen in: backing off, or
		// up again after them. The gate weighs them against its limit; a
		// poll that missed the back-off must not miss the crash.
		rep.Failures = st.QuickExits
	}
	return rep
}

// stuck reports whether a Degraded process stays so without a change: it
// failed at its startLimit, or exited for good under its restart policy.
// One backing off may yet come up (a database not up yet): the revision
// gate weighs its failures against its failureLimit.
func stuck(st *supervise.Status) bool {
	return st != nil && (st.State == supervise.Failed || st.State == supervise.Exited)
}

// shimSpec turns a Process into what its supervisor runs.
func shimSpec(env *Env, r *resource.Resource, spec *ProcessSpec, hash string) (supervise.Spec, error) {
	uid, gid, home, err := credentials(spec.User)
	if err != nil {
		return supervise.Spec{}, err
	}
	dir, err := workingDir(env, spec.WorkingDir)
	if err != nil {
		return supervise.Spec{}, err
	}
	limits, err := spec.Resources.limits()
	if err != nil {
		return supervise.Spec{}, err
	}
	stateDir, err := filepath.Abs(env.State.Path())
	if err != nil {
		return supervise.Spec{}, err
	}
	name := r.Metadata.Name
	logFile, _ := supervise.Files(stateDir, name)
	cg, why := supervise.CgroupBase(stateDir)
	if cg != "" {
		cg = filepath.Join(cg, name)
	}
	secrets, err := readSecrets(env, spec.SecretEnv)
	if err != nil {
		return supervise.Spec{}, err
	}
	var secretFiles map[string]string
	for _, s := range secrets {
		if secretFiles == nil {
			secretFiles = map[string]string{}
		}
		secretFiles[s.name] = s.host // the supervisor reads it; the value stays out of the spec file
	}
	sopsEnv, err := sopsEnvSpec(env, &spec.Exec)
	if err != nil {
		return supervise.Spec{}, err
	}
	stopSig, stopTimeout := spec.stop()
	return supervise.Spec{
		ID: string(r.ID()), Name: name, Command: spec.Command, Env: processEnv(env, spec.Env, home), Dir: dir, SecretEnv: secretFiles, SecretEnvFile: sopsEnv,
		UID: uid, GID: gid, RestartPolicy: spec.RestartPolicy.OrDefault(), StopSignal: stopSig, StopTimeout: stopTimeout,
		Backoff: supervise.Backoff{
			MinUptime: spec.MinUptime.Std(), Delay: spec.RestartDelay.Std(),
			MaxDelay: spec.MaxRestartDelay.Std(), StartLimit: spec.StartLimit,
		}.WithDefaults(),
		Liveness: spec.LivenessProbe, Readiness: spec.ReadinessProbe,
		LogFile: logFile, LogMax: supervise.DefaultLogMax, Hash: hash,
		Cgroup: cg, NoCgroup: why, Resources: limits, Singleton: spec.Singleton,
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
