package edge

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type edgeMetrics struct {
	connections  *prometheus.CounterVec
	active       *prometheus.GaugeVec
	authFailures *prometheus.CounterVec
	admissions   *prometheus.CounterVec
	// admissionReads counts admissions by where their quota reads came from (read, cached, running).
	admissionReads *prometheus.CounterVec
	requests       *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	frames         *prometheus.CounterVec
	// rateFallbacks counts rate decisions this edge took alone because the shared buckets failed.
	rateFallbacks prometheus.Counter
	// forwarded counts connections and requests this edge forwarded over the mesh, forwardServed those it
	// served for other regions' edges.
	forwarded, forwardServed *prometheus.CounterVec
	// wtRefused counts WebTransport requests refused before an agent channel started.
	wtRefused *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*edgeMetrics, error) {
	m := &edgeMetrics{
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_edge_connections_total", Help: "Agent channel connections accepted, by transport.",
		}, []string{"transport"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warren_edge_connections_active", Help: "Agent channel connections open now, by transport.",
		}, []string{"transport"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_edge_auth_failures_total", Help: "Rejected tokens by reason.",
		}, []string{"reason"}),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_edge_admissions_total", Help: "Admission decisions by outcome.",
		}, []string{"outcome"}),
		admissionReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_edge_admission_reads_total", Help: "Admissions by the source of their quota reads: read (the quota store) or cached (a sandbox API request within AdmissionCacheTTL of the user's last read), or running (a sandbox API request within 250 ms of the user's last usage read, relayed to the running sandbox that admission found).",
		}, []string{"source"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_edge_requests_total", Help: "Sandbox API requests by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "warren_edge_request_seconds", Help: "Sandbox API latency through the edge, by route (exec included).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"route"}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_edge_frames_total", Help: "Agent channel frames relayed, by direction.",
		}, []string{"direction"}),
		rateFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_edge_rate_fallbacks_total", Help: "Rate-limit decisions taken by this edge's own buckets because the shared ones failed.",
		}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_edge_forwarded_total",
			Help: "Agent channels (kind ws) and sandbox requests (http) forwarded to the region holding the user, by target region and outcome (ok, no_edge, mesh_failed, error).",
		}, []string{"kind", "region", "outcome"}),
		forwardServed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_edge_forwarded_served_total",
			Help: "Forwarded agent channels and requests served for another region's edge, by kind, peer region and outcome (ok, refused, bad_grant).",
		}, []string{"kind", "peer", "outcome"}),
		wtRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_edge_webtransport_refused_total",
			Help: "WebTransport requests refused before an agent channel started, by reason (not_found, method, upgrade, no_stream).",
		}, []string{"reason"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.connections, m.active, m.authFailures, m.admissions, m.admissionReads, m.requests, m.latency, m.frames, m.rateFallbacks, m.forwarded, m.forwardServed, m.wtRefused} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("edge: register metrics: %w", err)
			}
		}
	}
	return m, nil
}
