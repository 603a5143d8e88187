package stream

import (
	"github.com/prometheus/client_golang/prometheus"

	promreg "github.com/agentd/agentd/internal/metrics"
)

// Reasons for which the Hub drops a client.
const (
	dropSlow         = "slow"          // its buffer of live batches overflowed
	dropWriteTimeout = "write_timeout" // a write missed its deadline
)

// metrics are the Hub's Prometheus series. They exist even when nothing
// registers them, so that the code never checks.
type metrics struct {
	clients prometheus.Gauge
	sent    prometheus.Counter
	dropped *prometheus.CounterVec
	lag     prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		clients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentd_sse_clients", Help: "Open SSE event streams on this instance.",
		}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_sse_events_sent_total", Help: "Run events written to SSE clients, replayed or live.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_sse_clients_dropped_total", Help: "SSE clients dropped for not keeping up, by reason (slow, write_timeout).",
		}, []string{"reason"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "agentd_event_delivery_lag_seconds",
			Help:    "Time from an event's commit to its live delivery to an SSE client.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
	m.clients = promreg.Register(reg, m.clients)
	m.sent = promreg.Register(reg, m.sent)
	m.dropped = promreg.Register(reg, m.dropped)
	m.lag = promreg.Register(reg, m.lag)
	return m
}

func (h *Hub) countDrop(reason string) {
	h.dropped.Add(1)
	h.metrics.dropped.WithLabelValues(reason).Inc()
}
