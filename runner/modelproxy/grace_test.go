package modelproxy_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/billing/spool"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/runner/modelproxy"
)

// testGrace is a grace allowance worth a few short sonnet calls of the "plain" scenario (about 400 µ$
// each, with a worst case of 650 µ$ of input before any output).
const testGrace = 2000

var spoolOpts = spool.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}

func openSpool(t testing.TB, path string, l billing.Ledger) *spool.Spool {
	t.Helper()
	s, err := spool.Open(path, l, spoolOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func flushSpool(t testing.TB, s *spool.Spool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// spendGrace sends calls asking for 1000 output tokens while the ledger is down, and checks that each goes
// ahead bounded by what is left of the session's grace — its max_tokens lowered so that its worst case
// fits — until the grace cannot take one: that call gets the 402 the CLI does not retry. It returns the
// calls that went ahead and what they cost.
func spendGrace(t *testing.T, e *env, token string, grace int64) (calls int, cost int64) {
	t.Helper()
	const model = "claude-sonnet-4-5"
	price := e.prices.Lookup(model)
	worst := billing.Price{Input: price.MaxInput(), Output: price.Output}
	for {
		before := len(e.modelCalls())
		resp, b := post(t, e.url, "/v1/messages", token, "plain", body(model, 1000, true))
		if resp.StatusCode == http.StatusPaymentRequired {
			wantRefusal(t, resp, b, "metering is unavailable")
			if n := len(e.modelCalls()); n != before {
				t.Errorf("the refused call reached the model")
			}
			break
		}
		wantStatus(t, resp, b, http.StatusOK)
		reqs := e.modelCalls()
		fwd := reqs[len(reqs)-1]
		left := grace - cost
		if w := worst.Cost(billing.TokenUsage{InputTokens: int64(len(fwd.Body)), OutputTokens: int64(fwd.MaxTokens)}); fwd.MaxTokens >= 1000 || w > left {
			t.Fatalf("call %d forwarded max_tokens %d (worst case %d µ$) with %d µ$ of grace left", calls+1, fwd.MaxTokens, w, left)
		}
		cost += price.Cost(usageOf(t, b))
		calls++
		if calls > 20 {
			t.Fatal("the grace never ran out")
		}
	}
	if calls < 2 || cost > grace {
		t.Fatalf("%d calls for %d µ$ went ahead on a grace of %d µ$", calls, cost, grace)
	}
	t.Logf("%d calls went ahead on a grace of %d µ$ for %d µ$", calls, grace, cost)
	u := e.proxy.Usage("s1")
	if !u.MeteringUnavailable || u.BudgetExhausted {
		t.Errorf("turn flags %+v, want MeteringUnavailable only", u)
	}
	return calls, cost
}

// The ledger goes away: a running session's calls go ahead on its grace, clamped to what is left of it,
// then are refused. The grace does not come back while the ledger stays away. Their usage waits in the
// spool, and the next process's spool puts it in the ledger.
func TestGraceWhileLedgerDown(t *testing.T) {
	var sp *spool.Spool
	spoolPath := filepath.Join(t.TempDir(), "spool")
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) {
		c.Grace = testGrace
		sp = openSpool(t, spoolPath, c.Reserver.(billing.Ledger))
		c.Reserver = sp
	})
	token := e.proxy.OpenSession("s1", acct, 1_000_000)
	resp, b := post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 1000, true))
	wantStatus(t, resp, b, http.StatusOK)

	if err := e.ledger.Close(); err != nil {
		t.Fatal(err)
	}
	e.proxy.TurnStart("s1")
	calls, _ := spendGrace(t, e, token, testGrace)
	if d := sp.Depth(); d != calls {
		t.Errorf("%d events spooled for %d calls", d, calls)
	}
	if n := e.counter(t, "warren_modelproxy_reservations_total", "outcome", "grace"); n != float64(calls) {
		t.Errorf("grace reservations %v, want %d", n, calls)
	}
	resp, b = post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 10, true))
	wantRefusal(t, resp, b, "metering is unavailable")

	// The runner stops with the usage in its spool; the next one replays it.
	if err := e.proxy.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := sqlite.New(context.Background(), sqlite.Config{Path: e.lpath})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	flushSpool(t, openSpool(t, spoolPath, l))
	if u, want := ledgerUsage(t, l), e.proxy.Usage("s1").AIMicros; u.AIMicros != want || u.HeldAIMicros != 0 {
		t.Errorf("ledger %+v after the replay, want %d µ$ used and nothing held", u, want)
	}
}

// The grace allowance (docs/ARCHITECTURE.md#grace) with a ledger that comes back (PostgreSQL stopped and
// started): calls go ahead on the grace while it is down and are refused once the grace is spent; when it is
// back the spool replays their usage into the ledger, and the next answered Reserve makes the grace whole
// again for the next outage.
func TestGraceUntilLedgerBack(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartPostgreSQL(t)
	pool, err := cockroachdb.Open(ctx, srv.CreateDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ledger, err := cockroach.New(ctx, cockroach.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	sp := openSpool(t, filepath.Join(t.TempDir(), "spool"), ledger)
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) {
		c.Grace = testGrace
		c.Reserver = sp
	})
	token := e.proxy.OpenSession("s1", acct, 1_000_000)
	ok := func() {
		t.Helper()
		resp, b := post(t, e.url, "/v1/messages", token, "plain", body("claude-sonnet-4-5", 1000, true))
		wantStatus(t, resp, b, http.StatusOK)
		if reqs := e.ms.Requests(); reqs[len(reqs)-1].MaxTokens != 1000 {
			t.Errorf("max_tokens %d forwarded with the ledger up, want 1000", reqs[len(reqs)-1].MaxTokens)
		}
	}
	inLedger := func() {
		t.Helper()
		flushSpool(t, sp)
		u, err := ledger.Usage(ctx, acct)
		if err != nil {
			t.Fatal(err)
		}
		if want := e.proxy.Usage("s1").AIMicros; u.AIMicros != want || u.HeldAIMicros != 0 {
			t.Fatalf("ledger %+v, want the session's %d µ$ used and nothing held", u, want)
		}
	}
	ok()

	srv.Stop(t)
	e.proxy.TurnStart("s1")
	first, _ := spendGrace(t, e, token, testGrace)
	srv.Start(t)
	inLedger()
	e.proxy.TurnStart("s1")
	ok() // the ledger answers: the grace is whole again

	srv.Stop(t)
	e.proxy.TurnStart("s1")
	second, _ := spendGrace(t, e, token, testGrace)
	if second != first {
		t.Errorf("%d calls on the grace after it was refilled, %d the first time", second, first)
	}
	srv.Start(t)
	inLedger()
}
