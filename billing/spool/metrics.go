package spool

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are registered on Options.Metrics when set; otherwise they count into nothing.
type metrics struct {
	spooled  prometheus.Counter
	replayed *prometheus.CounterVec
	failures prometheus.Counter
	depth    prometheus.GaugeFunc
}

func newMetrics(reg prometheus.Registerer, depth func() int) (metrics, error) {
	m := metrics{
		spooled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_usage_spool_spooled_total",
			Help: "Usage events written to the local spool because the ledger was unavailable.",
		}),
		replayed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_usage_spool_replayed_total",
			Help: "Spooled usage events replayed, by result (ok: in the ledger; dropped: refused as invalid, logged in full).",
		}, []string{"result"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_usage_spool_replay_failures_total",
			Help: "Replay attempts that found the ledger still unavailable.",
		}),
		depth: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warren_usage_spool_events",
			Help: "Usage events waiting in the local spool for the ledger.",
		}, func() float64 { return float64(depth()) }),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.spooled, m.replayed, m.failures, m.depth} {
			if err := reg.Register(c); err != nil {
				return metrics{}, fmt.Errorf("register usage spool metrics: %w", err)
			}
		}
	}
	return m, nil
}
