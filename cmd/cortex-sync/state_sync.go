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
	f := cmd.Flags()
	f.BoolVar(&s.acceptRollback, "accept-state-rollback", false, "trust a snapshot older than the last one this state dir wrote (a restored backup) and prune from its inventory")
	f.IntVar(&s.retention.Keep, "backup-keep", state.DefaultRetention.Keep, "after a successful sync, always keep this many of the newest backup runs")
	f.DurationVar(&s.retention.MaxAge, "backup-max-age", state.DefaultRetention.MaxAge, "after a successful sync, delete backup runs older than this that --backup-keep does not keep; 0 keeps them forever")
}
