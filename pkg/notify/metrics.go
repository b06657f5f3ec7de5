package notify

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count notifications by notifier type. A nil *Metrics counts
// nothing.
type Metrics struct {
	sentTotal, failedTotal, droppedTotal, retriesTotal *prometheus.CounterVec
}

// NewMetrics registers the notification counters on reg. Registering
// again (a config reload) reuses the counters already there.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"type"})
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if old, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					return old
				}
			}
			panic(err) // two different metrics of one name: a bug
		}
		return c
	}
	return &Metrics{
		sentTotal:    counter("cortexsync_notifications_sent_total", "Notifications delivered, by notifier type."),
		failedTotal:  counter("cortexsync_notifications_failed_total", "Notifications given up after their attempts or refused by the endpoint, by notifier type."),
		droppedTotal: counter("cortexsync_notifications_dropped_total", "Notifications dropped because the notifier's queue was full, by notifier type."),
		retriesTotal: counter("cortexsync_notifications_retries_total", "Delivery attempts retried after a server error, a rate limit or a network error, by notifier type."),
	}
}

// init makes typ's series exist at 0, so that rates and alerts see them.
func (m *Metrics) init(typ string) {
	if m == nil {
		return
	}
	for _, c := range []*prometheus.CounterVec{m.sentTotal, m.failedTotal, m.droppedTotal, m.retriesTotal} {
		c.WithLabelValues(typ)
	}
}

func (m *Metrics) sent(typ string) {
	if m != nil {
		m.sentTotal.WithLabelValues(typ).Inc()
	}
}

func (m *Metrics) failed(typ string) {
	if m != nil {
		m.failedTotal.WithLabelValues(typ).Inc()
	}
}

func (m *Metrics) dropped(typ string) {
	if m != nil {
		m.droppedTotal.WithLabelValues(typ).Inc()
	}
}

func (m *Metrics) retried(typ string) {
	if m != nil {
		m.retriesTotal.WithLabelValues(typ).Inc()
	}
}
