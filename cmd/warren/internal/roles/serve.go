package roles

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/internal/httpx"
)

// roleCommon are the flags every role has.
type roleCommon struct {
	listen, metricsListen, region, logLevel string
}

// parse parses args and returns the role's logger, tagged with role and region.
func (c *roleCommon) parse(fs *flag.FlagSet, args []string, stderr io.Writer, role string) (*slog.Logger, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	log, err := newLogger(stderr, c.logLevel)
	if err != nil {
		return nil, err
	}
	return log.With("role", role, "region", c.region), nil
}

func (c *roleCommon) register(fs *flag.FlagSet, defListen string) {
	fs.StringVar(&c.listen, "listen", env.Or("WARREN_LISTEN", defListen), "listen address ($WARREN_LISTEN)")
	fs.StringVar(&c.metricsListen, "metrics-listen", env.Or("WARREN_METRICS_LISTEN", ""), metricsListenUsage)
	fs.StringVar(&c.region, "region", env.Or("WARREN_REGION", "global"), "this region's name ($WARREN_REGION)")
	fs.StringVar(&c.logLevel, "log-level", env.Or("WARREN_LOG_LEVEL", "info"), "debug, info, warn or error ($WARREN_LOG_LEVEL)")
}

// serveRole serves h on listen until ctx ends, then drains for up to 10 s; the registry's metrics go to the
// separate listener c.metricsListen (none when empty), never to the role's own. It prints one JSON line
// {"event":"ready","addr":…,"metrics":…} on stdout once listening, so tests and supervisors know the ports.
func serveRole(ctx context.Context, role string, c roleCommon, h http.Handler, reg *prometheus.Registry, stdout io.Writer, log *slog.Logger) error {
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("%s: listen: %w", role, err)
	}
	return serveRoleOn(ctx, role, ln, c.metricsListen, h, reg, stdout, log)
}

// serveRoleOn is serveRole on a listener already bound.
func serveRoleOn(ctx context.Context, role string, ln net.Listener, metricsListen string, h http.Handler, reg *prometheus.Registry, stdout io.Writer, log *slog.Logger) error {
	mctx, stopMetrics := context.WithCancel(ctx)
	defer stopMetrics()
	metricsAddr, metricsDone, err := serveMetrics(mctx, metricsListen, reg, log)
	if err != nil {
		ln.Close()
		return fmt.Errorf("%s: %w", role, err)
	}
	defer func() { stopMetrics(); metricsDone() }()
	srv := httpx.NewServer(h, httpx.Config{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String())
	fmt.Fprintf(stdout, "{\"event\":\"ready\",\"role\":%q,\"addr\":%q,\"metrics\":%q}\n", role, ln.Addr().String(), metricsAddr)
	select {
	case err := <-served:
		return fmt.Errorf("%s: serve: %w", role, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return nil
}

func newRoleMetrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
