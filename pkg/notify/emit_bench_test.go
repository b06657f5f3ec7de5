package notify

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cortex-sync/cortex-sync/pkg/events"
)

// BenchmarkEmit is what a notifier costs the one who emits: filters,
// de-duplication and a queue that is full (nothing delivers), so every
// event past the first few is dropped and counted.
func BenchmarkEmit(b *testing.B) {
	for _, tc := range []struct {
		name     string
		distinct bool
	}{{"repeats", false}, {"distinct", true}} {
		b.Run(tc.name, func(b *testing.B) {
			n, err := New(Config{Type: Slack, URL: "http://127.0.0.1:1/hook"}, Options{Metrics: NewMetrics(prometheus.NewRegistry())})
			if err != nil {
				b.Fatal(err)
			}
			e := events.Event{Host: "web1", Severity: events.Warning, Reason: events.DriftCorrected, Resource: "File/motd", Message: "put back"}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if tc.distinct {
					e.Message = strconv.Itoa(i) // past maxTracked: told (dropped) every time
					i++
				}
				n.Emit(e)
			}
		})
	}
}
