package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// WorkqueueMetrics is a workqueue.MetricsProvider that keeps a client-go
// work queue's metrics as cortexsync_workqueue_*, labelled by the queue's
// name (a constant chosen in code, so bounded).
type WorkqueueMetrics struct {
	depth        *prometheus.GaugeVec
	adds         *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	workDuration *prometheus.HistogramVec
	unfinished   *prometheus.GaugeVec
	longest      *prometheus.GaugeVec
	retries      *prometheus.CounterVec
}

var _ workqueue.MetricsProvider = (*WorkqueueMetrics)(nil)

// NewWorkqueueMetrics registers the work queue metrics on reg; NewMetrics
// calls it, so use it alone only without NewMetrics.
func NewWorkqueueMetrics(reg prometheus.Registerer) *WorkqueueMetrics {
	// 100µs to ~28h: an item waits from a moment to a long backoff.
	buckets := prometheus.ExponentialBuckets(1e-4, 10, 10)
	w := &WorkqueueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cortexsync_workqueue_depth",
			Help: "Items waiting in the work queue.",
		}, []string{"name"}),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cortexsync_workqueue_adds_total",
			Help: "Items added to the work queue.",
		}, []string{"name"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cortexsync_workqueue_queue_duration_seconds",
			Help:    "Time an item waits in the work queue before it is taken.",
			Buckets: buckets,
		}, []string{"name"}),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cortexsync_workqueue_work_duration_seconds",
			Help:    "Time taken to process an item from the work queue.",
			Buckets: buckets,
		}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cortexsync_workqueue_unfinished_work_seconds",
			Help: "Seconds of work in progress not yet observed by work_duration; large values suggest stuck workers.",
		}, []string{"name"}),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cortexsync_workqueue_longest_running_processor_seconds",
			Help: "How long the longest-running worker of the work queue has been at its item.",
		}, []string{"name"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cortexsync_workqueue_retries_total",
			Help: "Items put back into the work queue with a rate limit (retries).",
		}, []string{"name"}),
	}
	reg.MustRegister(w.depth, w.adds, w.latency, w.workDuration, w.unfinished, w.longest, w.retries)
	return w
}

// NewDepthMetric implements workqueue.MetricsProvider.
func (w *WorkqueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return w.depth.WithLabelValues(name)
}

// NewAddsMetric implements workqueue.MetricsProvider.
func (w *WorkqueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return w.adds.WithLabelValues(name)
}

// NewLatencyMetric implements workqueue.MetricsProvider.
func (w *WorkqueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return w.latency.WithLabelValues(name)
}

// NewWorkDurationMetric implements workqueue.MetricsProvider.
func (w *WorkqueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return w.workDuration.WithLabelValues(name)
}

// NewUnfinishedWorkSecondsMetric implements workqueue.MetricsProvider.
func (w *WorkqueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return w.unfinished.WithLabelValues(name)
}

// NewLongestRunningProcessorSecondsMetric implements workqueue.MetricsProvider.
func (w *WorkqueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return w.longest.WithLabelValues(name)
}

// NewRetriesMetric implements workqueue.MetricsProvider.
func (w *WorkqueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return w.retries.WithLabelValues(name)
}
