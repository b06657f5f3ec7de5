// Command cortex-sync keeps a host converged to a Git repository of
// manifests: files, directory trees, symlinks, supervised processes and
// one-shot commands, applied and healed.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	profiled, cpuProfiled := startMemProfile(), startCPUProfile()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	cpuProfiled()
	profiled()
	stop()
	os.Exit(code)
}
