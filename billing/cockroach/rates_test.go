package cockroach_test

import (
	"errors"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/billing/ratestest"
	"github.com/warren-mesh/warren/internal/testenv"
)

func openRates(t *testing.T, dsn string, clock *ledgertest.Clock) *cockroach.RateBuckets {
	t.Helper()
	return open(t, dsn, cockroach.Config{Now: clock.Now}).RateBuckets()
}

func TestRateBucketsContract(t *testing.T) {
	skipShort(t)
	ratestest.Run(t, func(t *testing.T, clock *ledgertest.Clock) billing.RateBuckets {
		return openRates(t, testenv.PostgreSQL(t), clock)
	})
}

// Two ledgers, each with a pool of its own, on one database stand for two edges taking from one user's
// bucket.
func TestRateBucketsRaceTwoProcesses(t *testing.T) {
	dsn := testenv.PostgreSQL(t)
	clock := ledgertest.NewClock(ratestest.Start)
	ratestest.Race(t, openRates(t, dsn, clock), openRates(t, dsn, clock))
}

// Unlimited buckets are neither read nor written: a take of only those succeeds without the database,
// and one with a limited bucket needs it (ErrUnavailable when it is gone).
func TestRateBucketsUnlimitedTouchNothing(t *testing.T) {
	dsn := testenv.PostgreSQL(t)
	pool := openPool(t, dsn)
	l, err := cockroach.New(t.Context(), cockroach.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	r := l.RateBuckets()
	pool.Close()
	unlimited := billing.RateTake{Key: "u", PerMinute: billing.Unlimited}
	if ok, _, err := r.TakeAll(t.Context(), []billing.RateTake{unlimited}); err != nil || !ok {
		t.Fatalf("unlimited take with the pool closed = %v, %v; want allowed without the database", ok, err)
	}
	if _, _, err := r.TakeAll(t.Context(), []billing.RateTake{unlimited, {Key: "l", PerMinute: 1}}); !errors.Is(err, billing.ErrUnavailable) {
		t.Fatalf("limited take with the pool closed = %v, want ErrUnavailable", err)
	}
}
