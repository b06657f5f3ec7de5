//go:build crash

package index

import (
	"os"
	"strconv"
)

// The crash suite settles intent logs sooner than 32 MiB
// (CORTEX_SYNC_MAX_INTENT_LOG, in bytes), to kill writes around it.
func init() {
	if n, err := strconv.ParseInt(os.Getenv("CORTEX_SYNC_MAX_INTENT_LOG"), 10, 64); err == nil {
		MaxIntentLog = n
	}
}
