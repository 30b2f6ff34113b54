package roles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warren-mesh/warren/internal/httpx"
)

// metricsListenUsage is the -metrics-listen flag's help, the same for every role.
const metricsListenUsage = "address serving only GET /metrics to Prometheus, apart from the role's own listener; empty: none ($WARREN_METRICS_LISTEN)"

// serveMetrics serves reg at GET /metrics, and nothing else, on addr until ctx ends: the operators' listener
// (-metrics-listen), so metrics never share a listener with the public or internal API. It answers the bound
// address ("" and no listener when addr is ""); wait blocks until the server has stopped.
func serveMetrics(ctx context.Context, addr string, reg prometheus.Gatherer, log *slog.Logger) (bound string, wait func(), err error) {
	if addr == "" {
		return "", func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics listen: %w", err)
	}
	mux := &httpx.Mux{What: "metrics listener"} // anything else: a wire error, not Go's plain 404
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httpx.NewServer(mux, httpx.Config{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			_ = srv.Close()
		case <-done:
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return ln.Addr().String(), func() { <-done }, nil
}
