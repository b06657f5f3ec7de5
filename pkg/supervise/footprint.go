package supervise

// The supervisor is the whole cortex-sync binary re-executed, and its
// memory is mostly that binary's: before RunShim runs, the Go runtime and
// the init of every package linked in (cobra, go-git, prometheus, yaml …)
// fault in some 13 MB of the executable's code and read-only data, which
// VmRSS counts although supervising never touches most of it again. Two
// settings keep it small: the supervisor runs with one P, and once started
// it drops its mappings of the executable, so only what it goes on using
// comes back. A redactor (secret.go), the same binary again, does the
// same. docs/processes.md has the measurements.

// supervisorEnv is the supervisor's own environment (a process's comes
// from its spec). GOMAXPROCS=1 from the first instruction, not set later
// by RunShim: the runtime sizes per-P caches at start, and a fixed value
// also stops it from re-reading the cgroup's CPU limit. The supervisor
// waits on children, files and timers; one P is plenty.
var supervisorEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GOMAXPROCS=1"}
