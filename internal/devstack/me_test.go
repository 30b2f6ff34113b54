package devstack_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// GET /v1/me through the SDK: the budget after the quota caps the token, the limits in force, and the
// sandbox's state, absent before the first request (asking starts nothing) and running after it; a spent
// budget still answers; a bad token is unauthenticated.
func TestMeThroughTheEdge(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	qs := st.Ledger.(billing.Quotas)
	if _, err := qs.PutQuota(ctx, billing.QuotaKey{Issuer: devstack.DevIssuer, User: "mia"}, billing.Quota{
		AIMicros: 5_000_000, ComputeSeconds: 600, Window: billing.Day, MaxConcurrentSessions: 2,
		SandboxQuota: billing.SandboxQuota{MaxMemoryBytes: 512 << 20, MaxTerminals: 3},
	}, 0); err != nil {
		t.Fatal(err)
	}
	anchor := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	budget := func(ai, compute int64) func(*token.Claims) {
		return func(c *token.Claims) {
			c.HasBudget = true
			c.Budget = token.Budget{AIMicros: ai, ComputeSeconds: compute, Window: "day", WindowStart: anchor}
		}
	}
	c := client(t, st, "mia", budget(2_000_000, 1000))
	me, err := c.Me(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantReset := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	if me.Issuer != devstack.DevIssuer || me.User != "mia" || me.Region != "local" || me.Budget.Window != "day" ||
		!me.Budget.ResetsAt.Equal(wantReset) || !me.Budget.WindowStart.Equal(wantReset.Add(-24*time.Hour)) {
		t.Fatalf("me = %+v, want mia in region local, a day window resetting at %v", me, wantReset)
	}
	// The token's AI budget is below the quota's, the quota's compute below the token's.
	if me.Budget.AI != (wire.Allowance{Limit: 2_000_000, Used: 0, Remaining: 2_000_000}) ||
		me.Budget.Compute != (wire.Allowance{Limit: 600, Used: 0, Remaining: 600}) {
		t.Fatalf("budget = %+v", me.Budget)
	}
	if me.Limits.MemoryBytes != 512<<20 || me.Limits.Terminals != 3 || me.Sessions != (wire.MeSessions{Live: 0, Max: 2}) ||
		me.Rates.ConnectsPerMinute <= 0 || me.Rates.PromptsPerMinute <= 0 {
		t.Fatalf("limits %+v, sessions %+v, rates %+v", me.Limits, me.Sessions, me.Rates)
	}
	if me.Sandbox.State != wire.SandboxAbsent {
		t.Fatalf("sandbox before any request: %+v, want absent", me.Sandbox)
	}
	if again, err := c.Me(ctx); err != nil || again.Sandbox.State != wire.SandboxAbsent {
		t.Fatalf("asking again: %+v, %v; GET /v1/me must not start the sandbox", again.Sandbox, err)
	}

	if _, err := c.Sandbox().Exec(ctx, wire.ExecRequest{Command: "true"}); err != nil {
		t.Fatal(err)
	}
	me, err = c.Me(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if me.Sandbox.State != wire.SandboxRunning || me.Sandbox.Region != "local" || me.Sandbox.Epoch < 1 || me.Sandbox.Since.IsZero() {
		t.Fatalf("sandbox after an exec: %+v, want running in local", me.Sandbox)
	}

	// A spent budget is refused by the sandbox API but still reported.
	spent := client(t, st, "mia", budget(2_000_000, 0))
	if _, err := spent.Sandbox().Exec(ctx, wire.ExecRequest{Command: "true"}); !warren.IsCode(err, warren.CodeBudgetExceeded) {
		t.Fatalf("exec on a spent budget: %v", err)
	}
	if me, err := spent.Me(ctx); err != nil || me.Budget.Compute.Remaining != 0 || me.Budget.Compute.Limit != 0 {
		t.Fatalf("me on a spent budget: %+v, %v", me.Budget, err)
	}

	bad, err := warren.New(st.URL(), "not-a-token")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Me(ctx); !warren.IsCode(err, warren.CodeUnauthenticated) {
		t.Fatalf("me with a bad token: %v, want unauthenticated", err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.URL()+"/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+mint(t, st, "mia"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("POST /v1/me: %d, want it refused", resp.StatusCode)
	}
}
