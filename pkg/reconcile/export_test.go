package reconcile

import (
	"context"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// The steps of a revision's life, for the engine's own tests: outside
// them only Life sequences them.

func (s *Session) Admit(ctx context.Context, rev string) Admission { return s.admit(ctx, rev) }

func (s *Session) Begin(d *Desired, keys []resource.ID, wasOn bool, now time.Time) *Trial {
	return s.begin(d, keys, wasOn, now)
}

func (s *Session) Judge(t *Trial, j Judgement, now time.Time) { s.judge(t, j, now) }

func (s *Session) RecordRollback(ctx context.Context, r Rollback, now time.Time) error {
	return s.recordRollback(ctx, r, now)
}

func (s *Session) Release(ctx context.Context, all bool) (string, error) { return s.release(ctx, all) }
