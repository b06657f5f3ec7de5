package events_test

import (
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// BenchmarkEmit is what telling an event costs the caller: a queue send
// (the writer appends beside it).
func BenchmarkEmit(b *testing.B) {
	l := openLog(b, b.TempDir(), events.LogOptions{Queue: 1 << 20})
	e := ev(1)
	b.ReportAllocs()
	for b.Loop() {
		l.Emit(e)
	}
	b.StopTimer()
	l.Close()
}

// BenchmarkWrite is the writer's cost per event, rotations included:
// events emitted and the log closed once all are on disk.
func BenchmarkWrite(b *testing.B) {
	dir := b.TempDir()
	l, err := events.OpenLog(state.At(dir), events.LogOptions{Queue: b.N + 1})
	if err != nil {
		b.Fatal(err)
	}
	e := ev(1)
	b.ResetTimer()
	for range b.N {
		l.Emit(e)
	}
	l.Close()
}

// BenchmarkReadFullLog is cortex-sync events on a full log: two files of
// DefaultLogMax.
func BenchmarkReadFullLog(b *testing.B) {
	dir := b.TempDir()
	l, err := events.OpenLog(state.At(dir), events.LogOptions{Queue: 100_000})
	if err != nil {
		b.Fatal(err)
	}
	e := ev(1)
	e.Revision = "main@sha1:8188aa7d006ee17c16b93626328599834b1ccb84"
	e.Message = "File/index put back to what Git says (driftedOnHost: update)"
	for i := range 40_000 {
		e.Time = time.Unix(1_700_000_000+int64(i), 0).UTC()
		l.Emit(e)
	}
	l.Close()
	n := 0
	b.ResetTimer()
	for b.Loop() {
		got, err := events.Read(state.At(dir), time.Time{})
		if err != nil {
			b.Fatal(err)
		}
		n = len(got)
	}
	b.ReportMetric(float64(n), "events")
}
