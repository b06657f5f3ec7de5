package fleet

import (
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// BootTime is now on CLOCK_BOOTTIME: the clock a Holder's deadline is on,
// the same in every process of the host (the supervisor enforces it).
func BootTime() time.Duration { return supervise.BootTime() }
