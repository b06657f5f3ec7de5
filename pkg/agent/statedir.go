package agent

import (
	"context"
	"time"
)

// The state dir can be removed under a running agent (the advice for a
// damaged snapshot is to move it away, and not everyone stops the agent
// first). What runs must not go down with it, and what the agent knows
// must not be forgotten: it saves the snapshot it holds in memory again,
// takes its lock again, and reports the loss once.

// stateCheckEvery is how often the agent looks at its state dir when
// nothing told it to: a stat or two.
const stateCheckEvery = 2 * time.Second

// stateGoneSettle lets a removal (rm -rf) finish before the state dir is
// made again.
const stateGoneSettle = 200 * time.Millisecond

// keepStateDir looks at the state dir every stateCheckEvery, and soon
// after the supervisors' directory in it went, until ctx ends.
func (a *Agent) keepStateDir(ctx context.Context, w *watcher) {
	t := time.NewTicker(stateCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.stateDir.stateCheck:
			select {
			case <-ctx.Done():
				return
			case <-time.After(stateGoneSettle):
			}
		case <-t.C:
		}
		a.checkStateDir(ctx, w)
	}
}

// stateGone asks for a look at the state dir soon.
func (a *Agent) stateGone() {
	select {
	case a.stateDir.stateCheck <- struct{}{}:
	default:
	}
}

// checkStateDir reads a snapshot another cortex-sync saved, and when the
// state dir was removed, makes it whole again: the snapshot saved, the
// agent lock taken, the supervisors' directory watched, the report
// written.
func (a *Agent) checkStateDir(ctx context.Context, w *watcher) {
	lost := false
	if l := a.opts.Lock; l != nil && !l.Held() {
		lost = true
		if err := l.Retake(); err != nil {
			a.log.Error("the agent lock went with the state dir and cannot be taken again: two agents may run on it", "error", err)
		}
	}
	if err := a.sess.Writer().Check(ctx); err != nil {
		a.log.Warn("state dir", "error", err)
	}
	if a.stateDir.stateLost.Swap(false) {
		lost = true
	}
	if !lost {
		return
	}
	a.log.Error("the state dir was removed under the running agent: made again, with the snapshot the agent holds (what it created, the source, the history) and its lock; supervised processes kept running; backups made before are gone, the Git cache and tree indexes are made again as needed",
		"state_dir", a.sess.State.Path())
	w.watchProcs()
	a.publishNow()
}
