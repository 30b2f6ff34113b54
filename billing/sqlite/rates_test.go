package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/billing/ratestest"
	"github.com/warren-mesh/warren/billing/sqlite"
)

func openRates(t *testing.T, path string, clock *ledgertest.Clock) *sqlite.RateBuckets {
	t.Helper()
	r, err := open(t, path, sqlite.WithClock(clock.Now)).RateBuckets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRateBucketsContract(t *testing.T) {
	ratestest.Run(t, func(t *testing.T, clock *ledgertest.Clock) billing.RateBuckets {
		return openRates(t, filepath.Join(t.TempDir(), "ledger.db"), clock)
	})
}

// Two ledgers on one file stand for two edges in separate processes taking from one user's bucket.
func TestRateBucketsRaceTwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	clock := ledgertest.NewClock(ratestest.Start)
	ratestest.Race(t, openRates(t, path, clock), openRates(t, path, clock))
}
