package agent_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/benchstat"
	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/agent"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// The last-known-good gate's figures (go test ./pkg/agent -run '^$' -bench
// 'Rollback|OneFileGood' -benchtime 10x): they report, they assert nothing.

// BenchmarkRollback: a bad revision (its process never gets ready) is
// judged bad at its deadline; from that verdict to the last good revision
// converged again (its file back, its process running and ready), against
// the restart of that process alone (from its restart's apply to ready).
func BenchmarkRollback(b *testing.B) {
	h := newLKGHost(b)
	h.minReady, h.deadline = 200*time.Millisecond, time.Second
	version(h.files, "1", true)
	kbFiles(h.files, "a.md")
	good := h.commit("first", h.files)
	h.startGood(good)
	applied := regexp.MustCompile(`time=(\S+) level=INFO msg=applied resource=Process/web revision=` + regexp.QuoteMeta(good) + ` action=restart`)
	var toGood, restart []time.Duration
	for i := 0; b.Loop(); i++ {
		version(h.files, fmt.Sprintf("2.%d", i), false)
		bad := h.commit(fmt.Sprintf("bad %d", i), h.files)
		logged := len(applied.FindAllStringSubmatch(h.log.String(), -1))
		h.fetch()
		var converged time.Time
		h.waitFor(60*time.Second, "rolled back", func() bool {
			if read(h.conf) != "version 1\n" {
				return false
			}
			st := h.status()
			web := h.resource("Process/web")
			converged = time.Now()
			return st.Revision == good && st.OnRollback != nil && st.OnRollback.Head == bad && web != nil && web.Health == health.Healthy
		})
		var judged time.Time
		h.waitFor(10*time.Second, "the verdict saved", func() bool {
			for _, a := range historyOf(h.snapshot(), bad) {
				if a.Verdict == state.Bad {
					judged = a.JudgedAt
				}
			}
			return !judged.IsZero()
		})
		m := applied.FindAllStringSubmatch(h.log.String(), -1)
		if len(m) <= logged {
			b.Fatalf("no restart of Process/web logged for the rollback:\n%s", h.log.String())
		}
		at, err := time.Parse(time.RFC3339Nano, m[len(m)-1][1])
		if err != nil {
			b.Fatal(err)
		}
		toGood = append(toGood, converged.Sub(judged))
		restart = append(restart, converged.Sub(at))
	}
	report(b, "verdict-to-converged", toGood)
	report(b, "restart-to-ready", restart)
}

// BenchmarkOneFileGood: a revision that changes one file of a host with
// 1,000 managed files and 10 processes, fetched by a poll, is good minReady
// after its apply, plus what: the apply and the looks, no scan of the
// files. cpu-ms/revision is the process's CPU from the poll to the verdict
// (the benchmark waits on the log, without polling); the same with a
// minReady 4 s longer shows what a second of trial costs.
func BenchmarkOneFileGood(b *testing.B) {
	for _, minReady := range []time.Duration{time.Second, 5 * time.Second} {
		b.Run("poll/minReady="+minReady.String(), func(b *testing.B) { oneFileGood(b, minReady, agent.TriggerInterval) })
	}
	// A webhook (or a request) also scans everything for drift, as it
	// always did: the verdict must not wait for that scan.
	b.Run("webhook/minReady=1s", func(b *testing.B) { oneFileGood(b, time.Second, agent.TriggerWebhook) })
}

func oneFileGood(b *testing.B, minReady time.Duration, trigger agent.Trigger) {
	h := newLKGHost(b)
	h.minReady, h.deadline = minReady, time.Minute
	verdicts := make(chan struct{}, 1)
	h.handler = &onMessage{Handler: slog.NewTextHandler(io.Discard, nil), msg: "revision good: it is the last known good revision now", ch: verdicts}
	var m strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&m, "---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: f%d}\nspec: {path: /etc/app/d%d/f%d.conf, source: files/f%d}\n", i, i%20, i, i)
		h.files[fmt.Sprintf("files/f%d", i)] = gittest.S(fmt.Sprintf("%d\n", i))
	}
	for i := range 10 {
		fmt.Fprintf(&m, "---\napiVersion: cortex-sync/v1alpha1\nkind: Process\nmetadata: {name: p%d}\nspec: {command: [sleep, \"10000%d\"], readinessProbe: {exec: {command: [\"true\"]}}}\n", i, i)
	}
	h.files["all.yaml"] = gittest.S(m.String())
	h.commit("first", h.files)
	h.start()
	select {
	case <-verdicts:
	case <-time.After(2 * time.Minute):
		b.Fatal("the first revision not good in 2m")
	}
	var over []time.Duration
	var cpu time.Duration
	for i := 0; b.Loop(); i++ {
		h.files["files/f7"] = gittest.S(fmt.Sprintf("edit %d\n", i))
		rev := h.commit(fmt.Sprintf("one file, %d", i), h.files)
		before := benchstat.CPU(false)
		h.a.Reconcile(trigger)
		select {
		case <-verdicts:
		case <-time.After(time.Minute):
			b.Fatal("no verdict in 1m")
		}
		cpu += benchstat.CPU(false) - before
		h.waitFor(10*time.Second, "the verdict saved", func() bool {
			for _, a := range historyOf(h.snapshot(), rev) {
				if a.Verdict == state.Good {
					over = append(over, a.ToGood()-h.minReady)
					return true
				}
			}
			return false
		})
	}
	report(b, "good-beyond-minReady", over)
	b.ReportMetric(float64(cpu.Milliseconds())/float64(len(over)), "cpu-ms/revision")
}

// onMessage is a log handler that signals each record with message msg.
type onMessage struct {
	slog.Handler
	msg string
	ch  chan struct{}
}

func (o *onMessage) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == o.msg {
		o.ch <- struct{}{}
	}
	return o.Handler.Handle(ctx, r)
}

func (o *onMessage) WithAttrs(as []slog.Attr) slog.Handler {
	return &onMessage{Handler: o.Handler.WithAttrs(as), msg: o.msg, ch: o.ch}
}

func (o *onMessage) WithGroup(g string) slog.Handler {
	return &onMessage{Handler: o.Handler.WithGroup(g), msg: o.msg, ch: o.ch}
}

func report(b *testing.B, name string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, name+"-median-ms")
	b.ReportMetric(float64(d[len(d)-1].Microseconds())/1000, name+"-max-ms")
}
