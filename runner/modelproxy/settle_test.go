package modelproxy_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/runner/modelproxy"
)

// outageReserver is the real ledger whose settles fail while failures remain (an outage).
type outageReserver struct {
	billing.Reserver
	failures atomic.Int32
}

func (r *outageReserver) Settle(ctx context.Context, id string, ev billing.UsageEvent) error {
	if r.failures.Add(-1) >= 0 {
		return fmt.Errorf("settle: %w", billing.ErrUnavailable)
	}
	return r.Reserver.Settle(ctx, id, ev)
}

// A settle the ledger refuses for a while is retried in the background (internal/backoff: 1 s doubling,
// jittered) until it lands: the usage is charged once, and counted as retried.
func TestFailedSettleIsRetried(t *testing.T) {
	var out *outageReserver
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) {
		out = &outageReserver{Reserver: c.Reserver}
		out.failures.Store(2) // the settle and its first retry fail
		c.Reserver = out
	})
	token := e.proxy.OpenSession("s1", acct, -1)
	resp, b := post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 100, false))
	wantStatus(t, resp, b, http.StatusOK)
	waitFor(t, func() bool { return e.counter(t, "warren_modelproxy_settles_total", "result", "retried") == 1 },
		func() string { return fmt.Sprintf("no retried settle; %d failures left", out.failures.Load()) })
	if u := ledgerUsage(t, e.ledger); u.AIMicros <= 0 {
		t.Fatalf("usage after the retried settle: %+v", u)
	}
	if out.failures.Load() >= 0 {
		t.Fatalf("the outage was not met: %d failures left", out.failures.Load())
	}
}
