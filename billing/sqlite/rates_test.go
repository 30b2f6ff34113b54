package sqlite_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/billing/ratestest"
	"github.com/warren-mesh/warren/billing/sqlite"
)

func openRates(t *testing.T, path string, clock *ledgertest.Clock) *sqlite.RateBuckets {
	t.Helper()
	return open(t, sqlite.Config{Path: path, Now: clock.Now}).RateBuckets()
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

// Unlimited buckets are neither read nor written: a take of only those succeeds without the database,
// and one with a limited bucket needs it (ErrUnavailable when it is closed).
func TestRateBucketsUnlimitedTouchNothing(t *testing.T) {
	l, err := sqlite.New(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	r := l.RateBuckets()
	l.Close()
	unlimited := billing.RateTake{Key: "u", PerMinute: billing.Unlimited}
	if ok, _, err := r.TakeAll(t.Context(), []billing.RateTake{unlimited}); err != nil || !ok {
		t.Fatalf("unlimited take with the database closed = %v, %v; want allowed without it", ok, err)
	}
	if _, _, err := r.TakeAll(t.Context(), []billing.RateTake{unlimited, {Key: "l", PerMinute: 1}}); !errors.Is(err, billing.ErrUnavailable) {
		t.Fatalf("limited take with the database closed = %v, want ErrUnavailable", err)
	}
}
