package billing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/sqlite"
)

// TestLedgerTimer: calls through the wrappers reach the ledger unchanged and are counted by op and outcome.
func TestLedgerTimer(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.New(ctx, sqlite.Config{Path: t.TempDir() + "/ledger.db"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg := prometheus.NewRegistry()
	timer, err := billing.NewLedgerTimer(reg)
	if err != nil {
		t.Fatal(err)
	}
	tl, tr := timer.Ledger(l), timer.Reserver(l)
	acct := billing.Account{Issuer: "iss", User: "u", Window: billing.Lifetime}
	if n, err := tr.Reserve(ctx, "h1", acct, 100, 100, time.Minute); err != nil || n != 100 {
		t.Fatalf("Reserve = %d, %v", n, err)
	}
	if _, err := tr.Reserve(ctx, "h2", acct, 100, 1, time.Minute); !errors.Is(err, billing.ErrBudgetExceeded) {
		t.Fatalf("second Reserve = %v, want ErrBudgetExceeded", err)
	}
	if err := tr.Settle(ctx, "h1", billing.UsageEvent{Key: "e1", Account: acct, Kind: billing.KindAI, Model: "m", AIMicros: 40, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if u, err := tl.Usage(ctx, acct); err != nil || u.AIMicros != 40 {
		t.Fatalf("Usage = %+v, %v", u, err)
	}
	if err := tl.Record(ctx, billing.UsageEvent{Key: "bad"}); !errors.Is(err, billing.ErrInvalid) {
		t.Fatalf("Record invalid = %v", err)
	}
	for _, c := range []struct {
		op, outcome string
	}{{"reserve", "ok"}, {"reserve", "rejected"}, {"settle", "ok"}, {"usage", "ok"}, {"record", "rejected"}} {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range families {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, lp := range m.GetLabel() {
					labels[lp.GetName()] = lp.GetValue()
				}
				if labels["op"] == c.op && labels["outcome"] == c.outcome && m.GetHistogram().GetSampleCount() == 1 {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("no observation for op=%s outcome=%s", c.op, c.outcome)
		}
	}
}
