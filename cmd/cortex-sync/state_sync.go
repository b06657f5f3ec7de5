package main

import (
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
	cmd.Flags().BoolVar(&s.acceptRollback, "accept-state-rollback", false, "trust a snapshot older than the last one this state dir wrote (a restored backup) and prune from its inventory")
	addRetentionFlags(cmd, &s.retention, "after a successful sync")
}

// addRetentionFlags gives sync and run the backup retention, applied when
// (for the help text).
func addRetentionFlags(cmd *cobra.Command, r *state.Retention, when string) {
	f := cmd.Flags()
	f.IntVar(&r.Keep, "backup-keep", state.DefaultRetention.Keep, when+", always keep this many of the newest backup runs")
	f.DurationVar(&r.MaxAge, "backup-max-age", state.DefaultRetention.MaxAge, when+", delete backup runs older than this that --backup-keep does not keep; 0 keeps them forever")
}
