package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// stateSyncFlags are sync's flags about cortex-sync's own state: consent to
// a rolled-back snapshot, and how long backups are kept.
type stateSyncFlags struct {
	acceptRollback bool
	retention      state.Retention
}

func (s *stateSyncFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&s.acceptRollback, "accept-state-rollback", false, "trust a snapshot older than the last one this state dir wrote (a restored backup) and prune from its inventory")
	f.IntVar(&s.retention.Keep, "backup-keep", state.DefaultRetention.Keep, "after a successful sync, always keep this many of the newest backup runs")
	f.DurationVar(&s.retention.MaxAge, "backup-max-age", state.DefaultRetention.MaxAge, "after a successful sync, delete backup runs older than this that --backup-keep does not keep; 0 keeps them forever")
}

// before refuses to prune from a rolled-back snapshot unless the user
// accepted it: its inventory may name what cortex-sync no longer owns.
func (s *stateSyncFlags) before(e *engine, prune bool, log *slog.Logger) error {
	rb := e.snap.Rollback()
	switch {
	case rb == nil:
		return nil
	case s.acceptRollback:
		e.state.AcceptRollback(e.snap)
		log.Warn("state rollback accepted", "serial", e.snap.Serial, "lineage", e.snap.Lineage)
		return nil
	case prune:
		return fmt.Errorf("refusing to prune: %w", rb)
	}
	log.Warn("state rolled back; prune refused until accepted", "error", rb)
	return nil
}

// after applies backup retention once a sync has succeeded.
func (s *stateSyncFlags) after(e *engine, log *slog.Logger) {
	gone, err := e.state.PruneBackups(s.retention, time.Now())
	for _, r := range gone {
		log.Info("backup run deleted", "run", r.Name, "files", r.Files, "bytes", r.Bytes)
	}
	if err != nil {
		log.Warn("backup retention", "error", err)
	}
}
