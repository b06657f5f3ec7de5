package supervise

import (
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// BootTime is now on CLOCK_BOOTTIME, the clock of a fence: it counts a
// suspend as time passing (etcd's clock goes on while the host sleeps),
// where CLOCK_MONOTONIC, and Go's timers, stop.
func BootTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(err) // Linux has had CLOCK_BOOTTIME since 2.6.39
	}
	return time.Duration(ts.Nano())
}

var bootID = sync.OnceValue(func() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
})

// BootID names this boot of the host: fences of another boot are void.
func BootID() string { return bootID() }
