package main

import (
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"time"
)

// memProfileEnv names a file to write a heap profile to, taken when the
// live heap last reached a new high: where a command's memory goes at its
// peak, for the benchmarks (issue 10). Unset, nothing runs.
const memProfileEnv = "CORTEX_SYNC_MEMPROFILE"

// startMemProfile watches the live heap after each collection and writes
// the profile whenever it grows past its high by a sixteenth; the returned
// function stops the watch and writes a last profile if the heap grew
// since.
func startMemProfile() func() {
	file := os.Getenv(memProfileEnv)
	if file == "" {
		return func() {}
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var high uint64
	check := func() {
		metrics.Read(sample)
		live := sample[0].Value.Uint64()
		if live <= high+high/16 {
			return
		}
		high = live
		f, err := os.Create(file)
		if err != nil {
			return
		}
		pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				check()
			}
		}
	}()
	return func() {
		close(stop)
		<-done
		runtime.GC()
		check()
	}
}
