package agent

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/util/workqueue"

	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
)

// exercise gives every metric at least one series, so lint sees them all.
func exercise(m *Metrics) {
	m.ObserveReconcile(TriggerInterval, ResultSuccess, 1500*time.Millisecond)
	m.ObserveReconcile(TriggerWebhook, ResultFailure, 20*time.Millisecond)
	m.ObserveConvergence(TriggerDrift, 3*time.Second)
	m.DriftDetected("File")
	m.DriftCorrected("File")
	m.ObserveApply("Process", "restart", ResultSuccess)
	m.ObserveFetch(200*time.Millisecond, nil)
	m.ObserveFetch(time.Second, errors.New("unreachable"))
	m.ObserveApplied("0123456789abcdef0123456789abcdef01234567", time.Unix(1700000000, 0))
	m.ProcessRestarted(RestartCrash)
	m.RolledBack(reconcile.CauseUnhealthy)
	m.ObserveGood(12 * time.Second)
	m.SetRolledBack(true)
	m.SetResources([]ResourceState{
		{Kind: "File", Sync: health.Synced, Health: health.Healthy},
		{Kind: "Process", Sync: health.OutOfSync, Health: health.Degraded, Fighting: true},
	})
	for _, f := range []func(string) workqueue.HistogramMetric{m.Workqueue.NewLatencyMetric, m.Workqueue.NewWorkDurationMetric} {
		f("reconcile").Observe(0.01)
	}
	m.Workqueue.NewDepthMetric("reconcile").Inc()
	m.Workqueue.NewAddsMetric("reconcile").Inc()
	m.Workqueue.NewUnfinishedWorkSecondsMetric("reconcile").Set(0)
	m.Workqueue.NewLongestRunningProcessorSecondsMetric("reconcile").Set(0)
	m.Workqueue.NewRetriesMetric("reconcile").Inc()
	m.SetRefused(RefusedSignature)
	m.SetUnwatched(3)
}

func TestMetricsLint(t *testing.T) {
	reg := NewRegistry()
	m := NewMetrics(reg)
	exercise(m)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var ours int
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "cortexsync_") {
			ours++
		}
	}
	if want := 28; ours != want { // 26 + cortexsync_events_dropped_total, cortexsync_watch_unwatched_directories
		t.Errorf("%d cortexsync_ metric families gathered, want %d", ours, want)
	}
}

func TestMetricsValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.now = func() time.Time { return time.Unix(1700000100, 500_000_000) }
	exercise(m)
	m.ObserveReconcile("bogus", "odd", time.Second)
	m.ProcessRestarted("made up")

	tests := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"reconcile interval success", m.reconciles.WithLabelValues("interval", "success"), 1},
		{"reconcile webhook failure", m.reconciles.WithLabelValues("webhook", "failure"), 1},
		{"reconcile manual success starts at zero", m.reconciles.WithLabelValues("manual", "success"), 0},
		{"unknown trigger and result are bounded", m.reconciles.WithLabelValues("other", "failure"), 1},
		{"drift detected", m.driftDetected.WithLabelValues("File"), 1},
		{"drift corrected", m.driftCorrected.WithLabelValues("File"), 1},
		{"apply", m.applies.WithLabelValues("Process", "restart", "success"), 1},
		{"fetch errors", m.fetchErrors, 1},
		{"last fetch", m.lastFetch, 1700000100.5},
		{"last apply", m.lastApply, 1700000000},
		{"revision", m.revision, 1},
		{"restart crash", m.restarts.WithLabelValues("crash"), 1},
		{"restart unknown reason", m.restarts.WithLabelValues("other"), 1},
		{"restart liveness starts at zero", m.restarts.WithLabelValues("liveness"), 0},
		{"resources", m.resources.WithLabelValues("File", "Synced", "Healthy"), 1},
		{"fighting", m.fighting.WithLabelValues("Process"), 1},
		{"refused for its signature", m.refused.WithLabelValues(RefusedSignature), 1},
		{"not refused for its manifests", m.refused.WithLabelValues(RefusedManifests), 0},
	}
	for _, tt := range tests {
		if got := testutil.ToFloat64(tt.c); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, got, tt.want)
		}
	}
	if n := testutil.CollectAndCount(m.fetchDuration); n != 1 {
		t.Errorf("fetch duration: %d series", n)
	}
	const want = `
# HELP cortexsync_reconcile_duration_seconds Duration of reconcile runs by what triggered them.
# TYPE cortexsync_reconcile_duration_seconds histogram
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="0.01"} 0
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="0.025"} 0
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="0.05"} 0
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="0.1"} 0
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="0.25"} 0
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="0.5"} 0
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="1"} 0
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="2.5"} 1
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="5"} 1
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="10"} 1
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="30"} 1
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="60"} 1
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="120"} 1
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="300"} 1
cortexsync_reconcile_duration_seconds_bucket{trigger="interval",le="+Inf"} 1
cortexsync_reconcile_duration_seconds_sum{trigger="interval"} 1.5
cortexsync_reconcile_duration_seconds_count{trigger="interval"} 1
`
	if err := testutil.CollectAndCompare(onlyLabel(m.reconcileDuration, "interval"), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// onlyLabel collects one child of a histogram vec.
func onlyLabel(v *prometheus.HistogramVec, value string) prometheus.Collector {
	return collectorFunc{
		desc:    v,
		collect: func(ch chan<- prometheus.Metric) { ch <- v.WithLabelValues(value).(prometheus.Metric) },
	}
}

type collectorFunc struct {
	desc    prometheus.Collector
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) { c.desc.Describe(ch) }
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

func TestRevisionInfoKeepsOneSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	const head = `
# HELP cortexsync_source_revision_info The revision applied last; one series, value 1.
# TYPE cortexsync_source_revision_info gauge
`
	m.ObserveApplied("main@sha1:aaaa", time.Unix(10, 0))
	m.ObserveApplied("main@sha1:bbbb", time.Unix(20, 0))
	m.ObserveApplied("main@sha1:bbbb", time.Unix(30, 0))
	m.ObserveApplied("", time.Unix(40, 0)) // time only
	want := head + `cortexsync_source_revision_info{revision="main@sha1:bbbb"} 1` + "\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cortexsync_source_revision_info"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(m.lastApply); got != 40 {
		t.Errorf("last apply = %v, want 40", got)
	}
}

func TestSetResourcesDeletesSeriesThatWent(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.SetResources([]ResourceState{
		{Kind: "File", Sync: health.Synced, Health: health.Healthy},
		{Kind: "File", Sync: health.Synced, Health: health.Healthy},
		{Kind: "File", Sync: health.OutOfSync, Health: health.Missing, Fighting: true},
		{Kind: "Process", Sync: health.Synced, Health: health.Progressing},
	})
	m.SetResources([]ResourceState{
		{Kind: "File", Sync: health.Synced, Health: health.Healthy},
		{Kind: "File", Sync: health.Synced, Health: health.Healthy},
		{Kind: "File", Sync: health.Synced, Health: health.Healthy},
		{Kind: "Process", Sync: health.OutOfSync, Health: health.Degraded, Fighting: true},
	})
	const want = `
# HELP cortexsync_fighting_resources Resources that something else on the host keeps changing back, by kind.
# TYPE cortexsync_fighting_resources gauge
cortexsync_fighting_resources{kind="File"} 0
cortexsync_fighting_resources{kind="Process"} 1
# HELP cortexsync_resources Managed resources by kind, sync status and health, as observed when scraped.
# TYPE cortexsync_resources gauge
cortexsync_resources{health="Degraded",kind="Process",sync="OutOfSync"} 1
cortexsync_resources{health="Healthy",kind="File",sync="Synced"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cortexsync_resources", "cortexsync_fighting_resources"); err != nil {
		t.Error(err)
	}
	m.SetResources(nil)
	if n := testutil.CollectAndCount(m.resources) + testutil.CollectAndCount(m.fighting); n != 0 {
		t.Errorf("%d series left after an empty snapshot", n)
	}
}

func TestNewMetricsTwiceOnOneRegistryPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	defer func() {
		if recover() == nil {
			t.Error("no panic on a second registration")
		}
	}()
	NewMetrics(reg)
}

// TestWorkqueueAdapter drives a real client-go rate-limited queue.
func TestWorkqueueAdapter(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "reconcile", MetricsProvider: m.Workqueue})
	defer q.ShutDown()

	q.Add("a")
	q.Add("b")
	q.Add("a") // deduplicated by the queue: not an add
	if got := testutil.ToFloat64(m.Workqueue.depth.WithLabelValues("reconcile")); got != 2 {
		t.Errorf("depth = %v, want 2", got)
	}
	item, _ := q.Get()
	time.Sleep(5 * time.Millisecond)
	q.Done(item)
	q.AddRateLimited("c")
	// c arrives after its backoff; then take and finish everything.
	for range 2 {
		item, _ := q.Get()
		q.Forget(item)
		q.Done(item)
	}
	checks := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"adds", m.Workqueue.adds.WithLabelValues("reconcile"), 3},
		{"depth", m.Workqueue.depth.WithLabelValues("reconcile"), 0},
		{"retries", m.Workqueue.retries.WithLabelValues("reconcile"), 1},
	}
	for _, c := range checks {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	var workCount, latencyCount uint64
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			switch mf.GetName() {
			case "cortexsync_workqueue_work_duration_seconds":
				workCount = mm.GetHistogram().GetSampleCount()
				if s := mm.GetHistogram().GetSampleSum(); s < 0.005 {
					t.Errorf("work duration sum %v, want >= 5ms", s)
				}
			case "cortexsync_workqueue_queue_duration_seconds":
				latencyCount = mm.GetHistogram().GetSampleCount()
			}
		}
	}
	if workCount != 3 || latencyCount != 3 {
		t.Errorf("work duration count %d, queue duration count %d; want 3 and 3", workCount, latencyCount)
	}
}

// TestMetricsPromtool checks the real /metrics output with `promtool check
// metrics` where promtool is installed (Debian: apt-get install prometheus).
func TestMetricsPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed")
	}
	reg := NewRegistry()
	exercise(NewMetrics(reg))
	_, base := startServer(t, ServerOptions{Registry: reg})
	code, body, _ := do(t, "GET", base+"/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
