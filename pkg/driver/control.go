package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// ProcessOp is an operator's verb on a supervised process.
type ProcessOp string

// The verbs.
const (
	// OpRestart stops the process and starts it with its spec now (a
	// rollout restart); it also ends a Failed state and a hold.
	OpRestart ProcessOp = "restart"
	// OpStop holds the process stopped: sync leaves it so (Suspended)
	// until OpStart.
	OpStop ProcessOp = "stop"
	// OpStart ends a hold, starting the process; a Failed one starts too.
	OpStart ProcessOp = "start"
)

// ControlProcess carries out an operator's verb on a process the
// snapshot records, directly on the host: the command line calls it with
// or without an agent running, and the agent calls it for its API. The
// caller holds the state lock. It returns the process's health after.
func ControlProcess(ctx context.Context, env *Env, id resource.ID, op ProcessOp) (health.Report, error) {
	if id.Kind() != "Process" {
		return health.Report{}, fmt.Errorf("%s: only a Process can be %s", id, past(op))
	}
	rec := env.Snapshot.Find(string(id))
	if rec == nil {
		return health.Report{}, fmt.Errorf("%s is not in the inventory of %s: sync it first", id, env.State.Path())
	}
	name := id.Name()
	began := time.Now()
	var st *supervise.Status
	var err error
	switch op {
	case OpRestart:
		st, err = supervise.Restart(env.State.Path(), name)
	case OpStop:
		st, err = supervise.Hold(env.State.Path(), name)
	case OpStart:
		st, err = supervise.Release(env.State.Path(), name)
	default:
		return health.Report{}, fmt.Errorf("%q is not a process verb", op)
	}
	if errors.Is(err, supervise.ErrNoSpec) {
		st, err = rebuild(env, id, op)
	}
	if err != nil {
		return health.Report{}, fmt.Errorf("%s %s: %w", op, id, err)
	}
	if op == OpStop {
		// How this stop ended it, or that nothing ran.
		how := "it was not running"
		if e := st.LastExit; e != nil && !e.Time.Before(began) {
			cp := *e
			cp.Reason = ""
			how = cp.String()
		}
		return health.Report{Health: health.Suspended, Reason: how}, nil
	}
	return processDriver{}.health(ctx, env, rec), nil
}

// WaitStarted waits, up to timeout, until a process a verb started has
// proven itself — ready, or up for its minUptime — or has ended, and
// returns its health then: what is true after the fact, not the moment of
// its fork. One still short of that at timeout is Progressing, "started,
// not yet ready". Call it without the state lock: it may take minUptime.
func WaitStarted(ctx context.Context, env *Env, id resource.ID, timeout time.Duration) (health.Report, error) {
	rec := env.Snapshot.Find(string(id))
	if rec == nil {
		return health.Report{}, fmt.Errorf("%s is not in the inventory of %s", id, env.State.Path())
	}
	st, settled, err := supervise.Settle(ctx, env.State.Path(), id.Name(), timeout)
	if err != nil {
		return health.Report{}, fmt.Errorf("wait for %s: %w", id, err)
	}
	if settled || st == nil {
		return processDriver{}.health(ctx, env, rec), nil
	}
	d := "started, not yet ready"
	if st.Process.Alive() {
		d += fmt.Sprintf(": running as pid %d for %s", st.Process.PID, time.Since(st.Started).Round(100*time.Millisecond))
	}
	if st.Probe != "" {
		d += "; " + st.Probe
	}
	return health.Report{Health: health.Progressing, Reason: d}, nil
}

// rebuild starts a recorded process whose spec file is gone (an older
// cortex-sync started it) from the spec the snapshot recalls.
func rebuild(env *Env, id resource.ID, op ProcessOp) (*supervise.Status, error) {
	rec := env.Snapshot.Find(string(id))
	r, err := Host{Env: env}.Recall(rec)
	if err != nil {
		return nil, err
	}
	spec := r.Spec.(*ProcessSpec)
	s, err := shimSpec(env, r, spec, extraOf(rec).Hash)
	if err != nil {
		return nil, err
	}
	s.Hold = op == OpStop
	return supervise.Run(env.State.Path(), s)
}

func past(op ProcessOp) string {
	switch op {
	case OpRestart:
		return "restarted"
	case OpStop:
		return "stopped"
	}
	return "started"
}

// LogFile is where a Process's or a Command's output is kept.
func LogFile(stateDir string, id resource.ID) (string, error) {
	switch id.Kind() {
	case "Process":
		f, _ := supervise.Files(stateDir, id.Name())
		return f, nil
	case "Command":
		return commandLogFile(stateDir, id.Name()), nil
	}
	return "", fmt.Errorf("%s: only a Process or a Command has a log", id)
}

// logExists reports whether a file is there.
func logExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
