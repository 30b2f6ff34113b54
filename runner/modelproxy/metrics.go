package modelproxy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Reservation outcomes.
const (
	reserveGranted  = "granted"  // the whole worst case was held
	reserveClamped  = "clamped"  // less was held; max_tokens was lowered to fit
	reserveExceeded = "exceeded" // nothing (or too little for a minimal answer) was left
	reserveError    = "error"    // the ledger failed (and no grace was left)
	reserveGrace    = "grace"    // the ledger failed; the session's grace allowance took the call
)

// Rejection reasons.
const (
	rejectAuth     = "auth"
	rejectBudget   = "budget"
	rejectLedger   = "ledger"
	rejectTooLarge = "too_large"
	rejectInvalid  = "invalid"
	rejectNotFound = "not_found"
	rejectUpstream = "upstream_unreachable"
	rejectPolicy   = "policy"  // a model, beta, server tool or field the token or platform does not allow
	rejectRate     = "rate"    // the session's request rate
	rejectNoTurn   = "no_turn" // no turn of the session is running (Config.RequireTurn)
)

// metrics are registered on Config.Metrics when set; otherwise they count into nothing.
type metrics struct {
	reservations *prometheus.CounterVec
	settles      *prometheus.CounterVec
	rejected     *prometheus.CounterVec
	upstream     *prometheus.HistogramVec
	tokens       *prometheus.CounterVec
	micros       prometheus.Counter
	overspend    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_modelproxy_reservations_total",
			Help: "Budget reservations before model calls, by outcome (granted, clamped, exceeded, error, grace).",
		}, []string{"outcome"}),
		settles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_modelproxy_settles_total",
			Help: "Holds settled after model calls, by result (ok, retried, failed: the usage event was lost).",
		}, []string{"result"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_modelproxy_rejected_total",
			Help: "Requests the proxy answered itself, by reason (auth, budget, ledger, too_large, invalid, not_found, upstream_unreachable).",
		}, []string{"reason"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warren_modelproxy_upstream_seconds",
			Help:    "Model API latency: to the response headers (phase=headers) and to the end of the answer (phase=total).",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"phase"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_modelproxy_tokens_total",
			Help: "Tokens the model reported, by kind (input, output, cache_read, cache_creation).",
		}, []string{"kind"}),
		micros: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_modelproxy_ai_microdollars_total",
			Help: "Model cost settled, in microdollars.",
		}),
		overspend: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_modelproxy_overspend_total",
			Help: "Calls whose reported usage cost more than their reservation (the upstream ignored max_tokens).",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.reservations, m.settles, m.rejected, m.upstream, m.tokens, m.micros, m.overspend} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register model proxy metrics: %w", err)
			}
		}
	}
	return m, nil
}
