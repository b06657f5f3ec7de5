//go:build !linux

package fleet

import "time"

var processStart = time.Now()

// BootTime is the monotonic time since this process started: elsewhere
// than Linux there is no CLOCK_BOOTTIME, and no supervisor shares it.
func BootTime() time.Duration { return time.Since(processStart) }
