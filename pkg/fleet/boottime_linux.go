package fleet

import (
	"time"

	"golang.org/x/sys/unix"
)

// BootTime is now on CLOCK_BOOTTIME: the clock a Holder's deadline is on,
// the same in every process of the host (the supervisor enforces it).
func BootTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(err) // Linux has had CLOCK_BOOTTIME since 2.6.39
	}
	return time.Duration(ts.Nano())
}
