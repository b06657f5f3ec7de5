package main

import (
	"os"
	"runtime/pprof"
)

// cpuProfileEnv names a file to write a CPU profile of the whole command
// to: where a converged check spends its time, for the benchmarks
// (issue 20). Unset, nothing runs.
const cpuProfileEnv = "CORTEX_SYNC_CPUPROFILE"

// startCPUProfile starts the profile; the returned function writes it.
func startCPUProfile() func() {
	file := os.Getenv(cpuProfileEnv)
	if file == "" {
		return func() {}
	}
	f, err := os.Create(file)
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
