package mesh

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values of direction.
const (
	dirOut = "out" // a connection this node dialed, a stream it opened
	dirIn  = "in"  // a connection this node accepted, a stream it accepted
)

// metrics are registered on Config.Metrics when set; otherwise they count into nothing. Every peer label is
// a region that proved itself with a certificate (or was dialed, for failures of a dial), or "unknown".
type metrics struct {
	opened   *prometheus.CounterVec // peer, outcome
	accepted *prometheus.CounterVec // peer, outcome
	open     *prometheus.GaugeVec   // peer, direction
	bytes    *prometheus.CounterVec // peer, direction (sent, received)
	failures *prometheus.CounterVec // peer, reason
	conns    *connCollector
}

func newMetrics(reg prometheus.Registerer, n *Node) (metrics, error) {
	m := metrics{
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_mesh_streams_opened_total",
			Help: "Streams this edge opened to a peer, by peer region and outcome (ok or a failure reason).",
		}, []string{"peer", "outcome"}),
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_mesh_streams_accepted_total",
			Help: "Streams peers opened to this edge, by peer region and outcome (ok or a failure reason).",
		}, []string{"peer", "outcome"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warren_mesh_open_streams",
			Help: "Mesh streams open now, by peer region and direction (out: opened here, in: accepted here).",
		}, []string{"peer", "direction"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_mesh_stream_bytes_total",
			Help: "Stream payload bytes, by peer region and direction (sent, received).",
		}, []string{"peer", "direction"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_mesh_failures_total",
			Help: "Mesh failures by peer region (unknown when it did not prove one) and reason.",
		}, []string{"peer", "reason"}),
		conns: &connCollector{
			node: n,
			rtt: prometheus.NewDesc("warren_mesh_rtt_seconds",
				"Smoothed round-trip time of the mesh connections to a peer region (the largest when several).",
				[]string{"peer", "direction"}, nil),
			count: prometheus.NewDesc("warren_mesh_connections",
				"Mesh connections open now, by peer region and direction (out: dialed here, in: accepted here).",
				[]string{"peer", "direction"}, nil),
		},
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.opened, m.accepted, m.open, m.bytes, m.failures, m.conns} {
			if err := reg.Register(c); err != nil {
				return metrics{}, fmt.Errorf("register mesh metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m metrics) fail(peer, reason string) { m.failures.WithLabelValues(peer, reason).Inc() }

// connCollector reports the live connections' count and RTT at scrape time, from quic-go's own statistics.
type connCollector struct {
	node       *Node
	rtt, count *prometheus.Desc
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.rtt; ch <- c.count }

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ peer, dir string }
	type agg struct {
		n   int
		rtt float64
	}
	all := map[key]agg{}
	for _, lc := range c.node.liveConns() {
		k := key{lc.peer, lc.dir}
		a := all[k]
		a.n++
		a.rtt = max(a.rtt, lc.conn.ConnectionStats().SmoothedRTT.Seconds())
		all[k] = a
	}
	for k, a := range all {
		ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(a.n), k.peer, k.dir)
		ch <- prometheus.MustNewConstMetric(c.rtt, prometheus.GaugeValue, a.rtt, k.peer, k.dir)
	}
}
