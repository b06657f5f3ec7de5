package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Plan observes every resource against the desired state and decides: the
// plan diff shows and sync applies.
func (s *Session) Plan(ctx context.Context) *diff.Plan {
	plan := diff.Make(ctx, s.Host(), s.Desired.Set, s.Snapshot, s.Config.Concurrency)
	plan.Source, plan.Revision = s.Desired.Ref, s.Desired.Revision()
	return plan
}

// SyncOptions shape a sync.
type SyncOptions struct {
	Prune             bool // delete what left Git
	AllowEmpty        bool // prune even when the desired set is empty
	AllowSourceChange bool // prune even when the source changed
	// WaitTimeout bounds how long a dependent waits for its dependency to
	// turn healthy.
	WaitTimeout time.Duration
	// AcceptRollback trusts a snapshot older than the last one this state
	// dir wrote (a restored backup), and lets prune use its inventory.
	AcceptRollback bool
	// Retention is how long backups are kept after a successful sync; the
	// zero value keeps them all.
	Retention state.Retention
}

func (o SyncOptions) apply(s *Session) apply.Options {
	return apply.Options{
		Prune: o.Prune, AllowEmpty: o.AllowEmpty, AllowSourceChange: o.AllowSourceChange,
		Concurrency: s.Config.Concurrency, WaitTimeout: o.WaitTimeout, Save: s.State.Save, Log: s.Config.Log,
	}
}

// Check is the refusal a sync with these options would meet before it
// touches anything (a rolled-back snapshot, an empty desired set to prune,
// a changed source).
func (s *Session) Check(plan *diff.Plan, o SyncOptions) error {
	if rb := s.Snapshot.Rollback(); rb != nil && o.Prune && !o.AcceptRollback {
		return rb
	}
	return apply.Check(plan, s.Desired.Set, s.Snapshot, s.Desired.Ref, o.apply(s))
}

// Sync applies the plan and records it: every outcome in the inventory,
// the attempt with what did not apply, and the revision as applied only
// when all of it was. The session must have been opened to write.
func (s *Session) Sync(ctx context.Context, plan *diff.Plan, o SyncOptions) (*apply.Report, error) {
	if err := s.checkRollback(o); err != nil {
		return nil, err
	}
	if err := s.Check(plan, o); err != nil {
		return nil, err
	}
	s.Snapshot.Source = s.Desired.Ref
	rep, err := apply.Run(ctx, s.Host(), s.Desired.Set, plan, s.Snapshot, o.apply(s))
	if err != nil {
		return rep, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	s.Snapshot.LastAttempt, s.Snapshot.LastSyncTime = rep.Attempt(s.Desired.Revision(), now), now
	if !rep.Failed() {
		s.Snapshot.Revision = s.Desired.Revision()
	}
	if err := s.State.Save(s.Snapshot); err != nil {
		return rep, err
	}
	if !rep.Failed() && (o.Retention != state.Retention{}) {
		s.pruneBackups(o.Retention)
	}
	return rep, nil
}

// checkRollback refuses to prune from a rolled-back snapshot unless the
// user accepted it: its inventory may name what cortex-sync no longer owns.
func (s *Session) checkRollback(o SyncOptions) error {
	rb := s.Snapshot.Rollback()
	switch {
	case rb == nil:
		return nil
	case o.AcceptRollback:
		s.State.AcceptRollback(s.Snapshot)
		s.log().Warn("state rollback accepted", "serial", s.Snapshot.Serial, "lineage", s.Snapshot.Lineage)
		return nil
	case o.Prune:
		return fmt.Errorf("refusing to prune: %w", rb)
	}
	s.log().Warn("state rolled back; prune refused until accepted", "error", rb)
	return nil
}

// pruneBackups applies the backup retention after a successful sync.
func (s *Session) pruneBackups(r state.Retention) {
	gone, err := s.State.PruneBackups(r, time.Now())
	for _, run := range gone {
		s.log().Info("backup run deleted", "run", run.Name, "files", run.Files, "bytes", run.Bytes)
	}
	if err != nil {
		s.log().Warn("backup retention", "error", err)
	}
}

func (s *Session) log() *slog.Logger {
	if s.Config.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Config.Log
}

// WaitHealthy waits until what the sync applied (ids) and turns healthy
// after its apply is Healthy, up to timeout; it lists what is not, and why.
func (s *Session) WaitHealthy(ctx context.Context, ids []resource.ID, timeout time.Duration) []string {
	return apply.WaitHealthy(ctx, s.Host(), s.Snapshot, ids, timeout)
}
