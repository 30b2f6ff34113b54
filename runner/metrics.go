package runner

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics live in the runner's own registry (never the global default), served at /metrics.
type metrics struct {
	reg          *prometheus.Registry
	execs        *prometheus.CounterVec
	execDuration prometheus.Histogram
	fileOps      *prometheus.CounterVec
	network      *prometheus.CounterVec // the sandbox network's failures, by outcome
}

// Exec outcomes.
const (
	outcomeOK       = "ok"       // exit status 0
	outcomeNonzero  = "nonzero"  // any other exit status
	outcomeTimeout  = "timeout"  // killed by the wall-clock timeout
	outcomeCanceled = "canceled" // the client left or the runner shut down
	outcomeError    = "error"    // could not run
)

// Outcomes of a failure of the sandbox's network (sandbox.go).
const (
	networkRestarted = "restarted" // pasta exited and was started again
	networkDown      = "down"      // it could not be: the sandbox stopped
)

// Metrics is the runner's registry: what its API serves at /metrics (behind its key) and what
// `warren runner -metrics-listen` serves to Prometheus.
func (r *Runner) Metrics() prometheus.Gatherer { return r.metrics.reg }

func newMetrics(connections, commands func() float64) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_runner_exec_total",
			Help: "Commands run through the sandbox exec API, by outcome (ok, nonzero, timeout, canceled, error).",
		}, []string{"outcome"}),
		execDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "warren_runner_exec_duration_seconds",
			Help:    "Wall-clock duration of commands run through the exec API.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}),
		fileOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_runner_file_ops_total",
			Help: "File API operations, by op (read, write, delete, list) and result (ok or the error code).",
		}, []string{"op", "result"}),
		network: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_runner_sandbox_network_failures_total",
			Help: "Times the sandbox's network stack (pasta, with -sandbox-network=pasta) or its namespace's holder exited, by outcome (restarted, or down: the sandbox stopped).",
		}, []string{"outcome"}),
	}
	m.reg.MustRegister(
		m.execs, m.execDuration, m.fileOps, m.network,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warren_runner_agent_connections",
			Help: "Agent channel WebSocket connections open now.",
		}, connections),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warren_runner_running_commands",
			Help: "Commands running now.",
		}, commands),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}
