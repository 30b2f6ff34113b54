package roles

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/stacktest"
)

// A role's metrics are served on -metrics-listen only: its own listener (public for the edge) answers
// /metrics like any path of its handler, and the metrics listener answers nothing but GET /metrics.
// Without -metrics-listen no second port is opened.
func TestRoleMetricsOnTheirOwnListener(t *testing.T) {
	for _, metricsListen := range []string{"127.0.0.1:0", ""} {
		t.Run("metrics-listen="+metricsListen, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "warren_test_total", Help: "a test counter"}))
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			out := &stacktest.SyncBuffer{}
			served := make(chan error, 1)
			go func() {
				served <- serveRoleOn(ctx, "edge", ln, metricsListen, http.NotFoundHandler(), reg, out, slog.New(slog.DiscardHandler))
			}()
			var ready struct{ Event, Addr, Metrics string }
			stacktest.WaitFor(t, 10*time.Second, "the ready line", func() bool {
				return json.Unmarshal([]byte(out.String()), &ready) == nil && ready.Event == "ready"
			})
			if code, body := get(t, "http://"+ready.Addr+"/metrics"); code != http.StatusNotFound || strings.Contains(body, "warren_test_total") {
				t.Errorf("the role's own listener answers /metrics: %d %q", code, body)
			}
			if metricsListen == "" {
				if ready.Metrics != "" {
					t.Errorf("metrics listener %q without -metrics-listen", ready.Metrics)
				}
			} else {
				if code, body := get(t, "http://"+ready.Metrics+"/metrics"); code != http.StatusOK || !strings.Contains(body, "warren_test_total 0") {
					t.Errorf("the metrics listener answers %d %q", code, body)
				}
				for _, path := range []string{"/", "/healthz", "/v1/sandbox/exec"} {
					if code, body := get(t, "http://"+ready.Metrics+path); code != http.StatusNotFound || !strings.Contains(body, `"code":"not_found"`) {
						t.Errorf("the metrics listener answers %s with %d %q, want a not_found wire error", path, code, body)
					}
				}
			}
			cancel()
			if err := <-served; err != nil {
				t.Fatal(err)
			}
			if metricsListen != "" {
				if c, err := net.Dial("tcp", ready.Metrics); err == nil {
					c.Close()
					t.Error("the metrics listener still accepts after the role stopped")
				}
			}
		})
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
