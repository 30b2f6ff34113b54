package cockroach_test

import (
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/billing/ratestest"
	"github.com/warren-mesh/warren/internal/testenv"
)

func openRates(t *testing.T, dsn string, clock *ledgertest.Clock) *cockroach.RateBuckets {
	t.Helper()
	r, err := open(t, dsn, cockroach.WithClock(clock.Now)).RateBuckets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return r
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
