// Package benchstat holds what the benchmarks report beside their figures:
// the CPU they spent and the machine's load, which on a shared machine say
// how far a wall-clock figure can be trusted.
package benchstat

import (
	"os"
	"strings"
	"syscall"
	"time"
)

// CPU is the user+system time of this process so far, and, with children,
// of the children it reaped.
func CPU(children bool) time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	d := self.Utime.Nano() + self.Stime.Nano()
	if children {
		syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
		d += kids.Utime.Nano() + kids.Stime.Nano()
	}
	return time.Duration(d)
}

// Load is the load average over 1, 5 and 15 minutes, "?" where the system
// does not say.
func Load() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// Mean is the mean of xs.
func Mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
