package agent

import "time"

// SetWatchKernel has a's watcher add its inotify watches through wrap (a
// stand-in for a kernel out of watches: the real sysctl cannot be changed
// in a test), and retry unwatched directories after base, doubling to max.
// Called before Run.
func SetWatchKernel(a *Agent, wrap func(add func(dir string) error) func(dir string) error, base, max time.Duration) {
	a.watchTest.wrap, a.watchTest.base, a.watchTest.max = wrap, base, max
}
