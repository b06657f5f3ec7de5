package agent

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cortex-sync/cortex-sync/pkg/health"
)

// Trigger says what started a reconcile, or what change a convergence
// answered. It is a metric label: only the values below are kept, anything
// else is counted as "other".
type Trigger string

// The triggers.
const (
	TriggerRevision    Trigger = "revision"     // a new revision in the source
	TriggerDrift       Trigger = "drift"        // the host moved away from the last apply
	TriggerProcessExit Trigger = "process_exit" // a supervised process ended
	TriggerWebhook     Trigger = "webhook"      // a signed push webhook
	TriggerManual      Trigger = "manual"       // POST /api/v1/reconcile, `cortex-sync reconcile`
	TriggerInterval    Trigger = "interval"     // the poll schedule
	TriggerRollback    Trigger = "rollback"     // a rollback to an earlier revision, automatic or by hand
)

var triggers = []Trigger{TriggerRevision, TriggerDrift, TriggerProcessExit, TriggerWebhook, TriggerManual, TriggerInterval, TriggerRollback}

// Result is the outcome label of a reconcile or an apply.
type Result string

// The results.
const (
	ResultSuccess Result = "success"
	ResultFailure Result = "failure"
)

// RestartReason says why a process was restarted. It is a metric label:
// only the values below are kept, anything else is counted as "other".
type RestartReason string

// The restart reasons.
const (
	RestartCrash      RestartReason = "crash"       // it exited and its restartPolicy brought it back
	RestartLiveness   RestartReason = "liveness"    // its liveness probe failed
	RestartSpecChange RestartReason = "spec_change" // its spec changed in Git or drifted
	RestartRestartOn  RestartReason = "restart_on"  // a resource it restartOn's changed
)

var restartReasons = []RestartReason{RestartCrash, RestartLiveness, RestartSpecChange, RestartRestartOn}

// ResourceState is one resource's line of a status snapshot, as the
// resources gauges count it.
type ResourceState struct {
	Kind     string
	Sync     health.Sync
	Health   health.Status
	Fighting bool // see FightDetector
}

// Metrics holds every cortexsync_ metric. Its methods are safe for
// concurrent use. Label values are bounded: kinds, actions, sync and health
// statuses are closed sets; no IDs, paths, SHAs or error text, save the one
// series of cortexsync_source_revision_info.
type Metrics struct {
	reconciles        *prometheus.CounterVec
	reconcileDuration *prometheus.HistogramVec
	convergence       *prometheus.HistogramVec
	driftDetected     *prometheus.CounterVec
	driftCorrected    *prometheus.CounterVec
	applies           *prometheus.CounterVec
	resources         *prometheus.GaugeVec
	fighting          *prometheus.GaugeVec
	fetchDuration     prometheus.Histogram
	fetchErrors       prometheus.Counter
	lastFetch         prometheus.Gauge
	lastApply         prometheus.Gauge
	revision          *prometheus.GaugeVec
	restarts          *prometheus.CounterVec
	observeErrors     *prometheus.CounterVec
	rollbacks         *prometheus.CounterVec
	goodSeconds       prometheus.Histogram
	rolledBack        prometheus.Gauge
	verdict           *prometheus.GaugeVec
	refused           *prometheus.GaugeVec
	eventsDropped     prometheus.Counter
	unwatched         prometheus.Gauge

	// Workqueue is the provider to give a client-go work queue
	// (workqueue.TypedRateLimitingQueueConfig.MetricsProvider).
	Workqueue *WorkqueueMetrics

	now func() time.Time

	mu             sync.Mutex // guards the series sets below and revision
	resourceSeries map[resourceKey]bool
	fightingSeries map[string]bool
	rev            string
}

type resourceKey struct{ kind, sync, health string }

// Bucket bounds, in seconds: a reconcile of a host takes milliseconds to
// minutes; convergence can wait out a backoff or a slow process.
var (
	reconcileBuckets   = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	convergenceBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	fetchBuckets       = []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
)

// NewMetrics registers every cortexsync_ metric, the work queue's
// included, on reg. It panics if one is already registered there (a
// programming error), as prometheus.MustRegister does.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cortexsync_reconcile_total",
			Help: "Reconcile runs by what triggered them and their result.",
		}, []string{"trigger", "result"}),
		reconcileDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cortexsync_reconcile_duration_seconds",
			Help:    "Duration of reconcile runs by what triggered them.",
			Buckets: reconcileBuckets,
		}, []string{"trigger"}),
		convergence: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cortexsync_convergence_seconds",
			Help:    "Time from a change being seen (new revision, drift, process exit, request) to the resource it concerns converged, one per resource.",
			Buckets: convergenceBuckets,
		}, []string{"trigger"}),
		driftDetected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cortexsync_drift_detected_total",
			Help: "Resources found drifted from their last apply, by kind.",
		}, []string{"kind"}),
		driftCorrected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cortexsync_drift_corrected_total",
			Help: "Drifted resources put back, by kind.",
		}, []string{"kind"}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cortexsync_apply_total",
			Help: "Resource changes carried out, by kind, action and result.",
		}, []string{"kind", "action", "result"}),
		resources: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cortexsync_resources",
			Help: "Managed resources by kind, sync status and health, as observed when scraped.",
		}, []string{"kind", "sync", "health"}),
		fighting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cortexsync_fighting_resources",
			Help: "Resources that something else on the host keeps changing back, by kind.",
		}, []string{"kind"}),
		fetchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cortexsync_source_fetch_duration_seconds",
			Help:    "Duration of source fetches, failed ones included.",
			Buckets: fetchBuckets,
		}),
		fetchErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cortexsync_source_fetch_errors_total",
			Help: "Source fetches that failed.",
		}),
		lastFetch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cortexsync_source_last_fetch_success_timestamp_seconds",
			Help: "Unix time of the last successful source fetch.",
		}),
		lastApply: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cortexsync_last_apply_success_timestamp_seconds",
			Help: "Unix time of the last successful apply.",
		}),
		revision: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cortexsync_source_revision_info",
			Help: "The revision applied last; one series, value 1.",
		}, []string{"revision"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cortexsync_process_restarts_total",
			Help: "Supervised process restarts by reason.",
		}, []string{"reason"}),
		observeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cortexsync_observe_errors_total",
			Help: "Resources that could not be observed (their state on the host unknown, so not healed), by kind.",
		}, []string{"kind"}),
		rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cortexsync_rollbacks_total",
			Help: "Rollbacks to an earlier revision, by why: apply_failed, unhealthy, host_check (a bad revision) or manual (cortex-sync rollback).",
		}, []string{"reason"}),
		goodSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cortexsync_revision_good_seconds",
			Help:    "Time from a new revision's apply to its health gate's good verdict (minReady included).",
			Buckets: convergenceBuckets,
		}),
		rolledBack: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cortexsync_rolled_back",
			Help: "1 while a rollback holds the host on an earlier revision than its source's head (its last good one, or one named by hand), else 0.",
		}),
		verdict: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cortexsync_revision_verdict",
			Help: "1 for the verdict of the revision the host converges to: pending (on trial), good, bad, or none (not judged); 0 for the others.",
		}, []string{"verdict"}),
		refused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cortexsync_revision_refused",
			Help: "1 while the source's newest revision is refused, by why: signature (its commits fail verification) or manifests (they do not validate); else 0. The host stays on, and heals, the revision it runs.",
		}, []string{"reason"}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cortexsync_events_dropped_total",
			Help: "Events not written to the local event log because its queue was full (the agent never waits for it).",
		}),
		unwatched: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cortexsync_watch_unwatched_directories",
			Help: "Directories the agent should watch for drift and cannot, for want of inotify watches (fs.inotify.max_user_watches): the drift scan covers them, their watches are retried.",
		}),
		now:            time.Now,
		resourceSeries: map[resourceKey]bool{},
		fightingSeries: map[string]bool{},
	}
	reg.MustRegister(m.reconciles, m.reconcileDuration, m.convergence, m.driftDetected, m.driftCorrected,
		m.applies, m.resources, m.fighting, m.fetchDuration, m.fetchErrors, m.lastFetch, m.lastApply,
		m.revision, m.restarts, m.observeErrors, m.rollbacks, m.goodSeconds, m.rolledBack, m.verdict, m.refused, m.eventsDropped, m.unwatched)
	m.SetVerdict("")
	m.SetRefused("")
	// Known label values start at zero so rate() and absent() work from
	// the first scrape.
	for _, t := range triggers {
		m.reconciles.WithLabelValues(string(t), string(ResultSuccess))
		m.reconciles.WithLabelValues(string(t), string(ResultFailure))
	}
	for _, r := range restartReasons {
		m.restarts.WithLabelValues(string(r))
	}
	for _, r := range rollbackReasons {
		m.rollbacks.WithLabelValues(r)
	}
	m.Workqueue = NewWorkqueueMetrics(reg)
	return m
}

// NewRegistry is a registry with the Go runtime and process collectors,
// ready for NewMetrics and ServerOptions.Registry.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// The reasons of cortexsync_revision_refused.
const (
	RefusedSignature = "signature"
	RefusedManifests = "manifests"
)

// SetRefused sets cortexsync_revision_refused: 1 for reason (none when
// ""), 0 for the other.
func (m *Metrics) SetRefused(reason string) {
	for _, r := range []string{RefusedSignature, RefusedManifests} {
		v := 0.0
		if r == reason {
			v = 1
		}
		m.refused.WithLabelValues(r).Set(v)
	}
}

// SetUnwatched sets cortexsync_watch_unwatched_directories.
func (m *Metrics) SetUnwatched(n int) { m.unwatched.Set(float64(n)) }

// ObserveReconcile counts one reconcile run and its duration.
func (m *Metrics) ObserveReconcile(t Trigger, r Result, d time.Duration) {
	m.reconciles.WithLabelValues(triggerLabel(t), resultLabel(r)).Inc()
	m.reconcileDuration.WithLabelValues(triggerLabel(t)).Observe(d.Seconds())
}

// ObserveConvergence records the time from a change being seen to the host
// converging on it.
func (m *Metrics) ObserveConvergence(t Trigger, d time.Duration) {
	m.convergence.WithLabelValues(triggerLabel(t)).Observe(d.Seconds())
}

// DriftDetected counts a resource of kind found drifted.
func (m *Metrics) DriftDetected(kind string) { m.driftDetected.WithLabelValues(kind).Inc() }

// DriftCorrected counts a drifted resource of kind put back.
func (m *Metrics) DriftCorrected(kind string) { m.driftCorrected.WithLabelValues(kind).Inc() }

// ObserveApply counts one change carried out on a resource of kind; action
// is a plan action (create, update, delete, restart, run…).
func (m *Metrics) ObserveApply(kind, action string, r Result) {
	m.applies.WithLabelValues(kind, action, resultLabel(r)).Inc()
}

// ObserveFetch records one source fetch; a nil err also sets the last
// successful fetch time to now.
func (m *Metrics) ObserveFetch(d time.Duration, err error) {
	m.fetchDuration.Observe(d.Seconds())
	if err != nil {
		m.fetchErrors.Inc()
		return
	}
	m.lastFetch.Set(float64(m.now().UnixNano()) / 1e9)
}

// ObserveApplied records that revision was applied successfully at at: the
// revision info series moves to it (the old one is deleted) and the last
// apply time is set. An empty revision only sets the time.
func (m *Metrics) ObserveApplied(revision string, at time.Time) {
	m.lastApply.Set(float64(at.UnixNano()) / 1e9)
	if revision == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if revision == m.rev {
		return
	}
	// Set the new series before deleting the old one so that a scrape in
	// between never sees none.
	m.revision.WithLabelValues(revision).Set(1)
	if m.rev != "" {
		m.revision.DeleteLabelValues(m.rev)
	}
	m.rev = revision
}

// ObserveError counts a resource of kind that could not be observed (its
// state on the host unknown: not healed until it can be).
func (m *Metrics) ObserveError(kind string) { m.observeErrors.WithLabelValues(kind).Inc() }

// ProcessRestarted counts one supervised process restart.
func (m *Metrics) ProcessRestarted(reason RestartReason) {
	if !slices.Contains(restartReasons, reason) {
		reason = "other"
	}
	m.restarts.WithLabelValues(string(reason)).Inc()
}

// SetResources replaces the resources and fighting gauges with the counts
// of list (a whole status snapshot): the combinations present are set, and
// the series of those that went are deleted.
func (m *Metrics) SetResources(list []ResourceState) {
	counts := map[resourceKey]int{}
	fights := map[string]int{}
	for _, r := range list {
		counts[resourceKey{r.Kind, string(r.Sync), string(r.Health)}]++
		if r.Fighting {
			fights[r.Kind]++
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, n := range counts {
		m.resources.WithLabelValues(k.kind, k.sync, k.health).Set(float64(n))
	}
	for k := range m.resourceSeries {
		if _, ok := counts[k]; !ok {
			m.resources.DeleteLabelValues(k.kind, k.sync, k.health)
		}
	}
	m.resourceSeries = make(map[resourceKey]bool, len(counts))
	for k := range counts {
		m.resourceSeries[k] = true
	}
	for k := range counts {
		if _, ok := fights[k.kind]; !ok {
			fights[k.kind] = 0 // a kind with resources and no fight reads 0, not nothing
		}
	}
	for kind, n := range fights {
		m.fighting.WithLabelValues(kind).Set(float64(n))
	}
	for kind := range m.fightingSeries {
		if _, ok := fights[kind]; !ok {
			m.fighting.DeleteLabelValues(kind)
		}
	}
	m.fightingSeries = make(map[string]bool, len(fights))
	for kind := range fights {
		m.fightingSeries[kind] = true
	}
}

func triggerLabel(t Trigger) string {
	if slices.Contains(triggers, t) {
		return string(t)
	}
	return "other"
}

func resultLabel(r Result) string {
	if r == ResultSuccess {
		return string(r)
	}
	return string(ResultFailure)
}
