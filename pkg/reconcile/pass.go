package reconcile

import (
	"context"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
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
}

func (o SyncOptions) apply(s *Session) apply.Options {
	return apply.Options{
		Prune: o.Prune, AllowEmpty: o.AllowEmpty, AllowSourceChange: o.AllowSourceChange,
		Concurrency: s.Config.Concurrency, WaitTimeout: o.WaitTimeout, Save: s.State.Save, Log: s.Config.Log,
	}
}

// Check is the refusal a sync with these options would meet before it
// touches anything (an empty desired set to prune, a changed source).
func (s *Session) Check(plan *diff.Plan, o SyncOptions) error {
	return apply.Check(plan, s.Desired.Set, s.Snapshot, s.Desired.Ref, o.apply(s))
}

// Sync applies the plan and records it: every outcome in the inventory,
// the attempt with what did not apply, and the revision as applied only
// when all of it was. The session must have been opened to write.
func (s *Session) Sync(ctx context.Context, plan *diff.Plan, o SyncOptions) (*apply.Report, error) {
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
	return rep, s.State.Save(s.Snapshot)
}

// WaitHealthy waits until what the sync applied (ids) and turns healthy
// after its apply is Healthy, up to timeout; it lists what is not, and why.
func (s *Session) WaitHealthy(ctx context.Context, ids []resource.ID, timeout time.Duration) []string {
	return apply.WaitHealthy(ctx, s.Host(), s.Snapshot, ids, timeout)
}
