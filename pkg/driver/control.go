package driver

import (
	"context"
	"errors"
	"fmt"
	"os"

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
	var err error
	switch op {
	case OpRestart:
		_, err = supervise.Restart(env.State.Path(), name)
	case OpStop:
		_, err = supervise.Hold(env.State.Path(), name)
	case OpStart:
		_, err = supervise.Release(env.State.Path(), name)
	default:
		return health.Report{}, fmt.Errorf("%q is not a process verb", op)
	}
	if errors.Is(err, supervise.ErrNoSpec) {
		err = rebuild(env, id, op)
	}
	if err != nil {
		return health.Report{}, fmt.Errorf("%s %s: %w", op, id, err)
	}
	return processDriver{}.health(ctx, env, rec), nil
}

// rebuild starts a recorded process whose spec file is gone (an older
// cortex-sync started it) from the spec the snapshot recalls.
func rebuild(env *Env, id resource.ID, op ProcessOp) error {
	rec := env.Snapshot.Find(string(id))
	r, err := Host{Env: env}.Recall(rec)
	if err != nil {
		return err
	}
	spec := r.Spec.(*ProcessSpec)
	s, err := shimSpec(env, r, spec, extraOf(rec).Hash)
	if err != nil {
		return err
	}
	s.Hold = op == OpStop
	_, err = supervise.Run(env.State.Path(), s)
	return err
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
