package reconcile

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/apply"
	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// ErrPlanMoved: a saved plan no longer says what a sync would do here.
var ErrPlanMoved = errors.New("the saved plan no longer holds")

// ErrPlanElsewhere: a saved plan was made for another host or state dir.
var ErrPlanElsewhere = errors.New("the saved plan was made for another host or state dir")

// MadeFor says where, and against which snapshot, a plan made now is made:
// what a saved plan records.
func (s *Session) MadeFor() diff.MadeFor {
	snap := s.w.Snapshot()
	root, _ := filepath.Abs(s.Config.Root)
	dir, _ := filepath.Abs(s.Config.StateDir)
	lineage := snap.Lineage
	if snap.Serial == 0 {
		// Never saved: the lineage is one Load made up for this run, and
		// the next run makes up another. The plan is made against no
		// snapshot, and applies where there is none yet.
		lineage = ""
	}
	return diff.MadeFor{Host: state.HostID(), Root: root, StateDir: dir, Lineage: lineage, Serial: snap.Serial,
		Time: time.Now().UTC().Truncate(time.Second)}
}

// Warn adds to plan the refusal a sync --prune under p would meet, before
// anyone runs it: what diff shows, and what a saved plan binds.
func (s *Session) Warn(plan *diff.Plan, p Policy) {
	p.Prune = true
	d := s.current()
	if err := p.Check(plan, d.Set, s.w.Snapshot(), d.Ref); err != nil {
		plan.Warnings = append(plan.Warnings, "sync --prune would stop: "+err.Error())
	}
}

// SyncSaved applies a saved plan exactly as it was reviewed: it makes the
// plan again, under the lock, and applies it only when the host, the state
// dir, the snapshot and the source revision are what they were, and the
// fresh plan is what the file shows and decides (diff.Saved.Differs: every
// change as shown, its facts under the file's policy, the file's digest);
// else it refuses, naming what moved, and changes nothing. The file's
// policy applies once its changes proved it is the one they were planned
// with. The session must have been opened to write.
func (s *Session) SyncSaved(ctx context.Context, saved *diff.Saved, retention state.Retention) (*apply.Report, error) {
	here, was := s.MadeFor(), saved.MadeFor
	switch {
	case was.Host != here.Host:
		return nil, fmt.Errorf("%w: made on host %q, and this is host %q", ErrPlanElsewhere, was.Host, here.Host)
	case was.StateDir != here.StateDir || was.Root != here.Root:
		return nil, fmt.Errorf("%w: made for --state-dir %s and --root %s, not %s and %s", ErrPlanElsewhere, was.StateDir, was.Root, here.StateDir, here.Root)
	case was.Lineage == "" && here.Lineage != "":
		return nil, fmt.Errorf("%w: made before this state dir had a snapshot, and it has one now (serial %d)", ErrPlanMoved, here.Serial)
	case was.Lineage != here.Lineage:
		return nil, fmt.Errorf("%w: made against the snapshot of lineage %s, and this state dir's is %s", ErrPlanElsewhere, was.Lineage, here.Lineage)
	}
	var moved []string
	if was.Serial != here.Serial {
		moved = append(moved, fmt.Sprintf("the snapshot: serial %d when planned, %d now (another sync or the agent wrote it)", was.Serial, here.Serial))
	}
	d := s.current()
	if d.Ref != saved.Source || d.Revision() != saved.Revision {
		moved = append(moved, fmt.Sprintf("the source: %s at %q when planned, %s at %q now", saved.Source.URL, saved.Revision, d.Ref.URL, d.Revision()))
	}
	p := saved.Policy
	fresh := s.Plan(ctx)
	s.Warn(fresh, Policy{AllowEmpty: p.AllowEmpty, AllowSourceChange: p.AllowSourceChange})
	moved = append(moved, saved.Differs(fresh)...)
	if len(moved) > 0 {
		return nil, fmt.Errorf("%w; nothing was changed. What moved since it was made:\n  %s\nmake the plan again with diff --out, and review it", ErrPlanMoved, strings.Join(moved, "\n  "))
	}
	s.Policy.Prune, s.Policy.AllowEmpty, s.Policy.AllowSourceChange = p.Prune, p.AllowEmpty, p.AllowSourceChange
	s.Policy.AcceptRollback = false // the plan's warnings said what a rolled-back snapshot stops
	return s.Sync(ctx, fresh, retention)
}
