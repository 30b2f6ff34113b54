package cockroach_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// openPool connects to dsn for the test's duration.
func openPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := openPoolErr(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func openPoolErr(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	return cockroachdb.Open(ctx, dsn)
}

// open opens a ledger on a new pool to dsn, configured by cfg's other fields.
func open(t testing.TB, dsn string, cfg cockroach.Config) *cockroach.Ledger {
	t.Helper()
	cfg.Pool = openPool(t, dsn)
	l, err := cockroach.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The suites open ledgers in nested subtests (one from a parent's t), where a skip would come too late.
func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
}

func TestContract(t *testing.T) {
	skipShort(t)
	ledgertest.Run(t, func(t *testing.T) billing.Ledger { return open(t, testenv.PostgreSQL(t), cockroach.Config{}) })
}

func TestReserverContract(t *testing.T) {
	skipShort(t)
	ledgertest.RunReserver(t, func(t *testing.T, clock *ledgertest.Clock) ledgertest.ReserverLedger {
		return open(t, testenv.PostgreSQL(t), cockroach.Config{Now: clock.Now})
	})
}

// Two ledgers, each with a pool of its own, on one database stand for two LLM proxies in separate
// processes spending one user's budget.
func TestReserveRaceTwoProcesses(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			dsn := testenv.PostgreSQL(t)
			clock := ledgertest.NewClock(ledgertest.Start.Add(time.Hour))
			ledgertest.ReserveRace(t, seed, open(t, dsn, cockroach.Config{Now: clock.Now}), open(t, dsn, cockroach.Config{Now: clock.Now}))
		})
	}
}

// Two ledgers on one database stand for a runner and its replay of spooled events in another process.
func TestTwoProcessesCountOnce(t *testing.T) {
	dsn := testenv.PostgreSQL(t)
	a, b := open(t, dsn, cockroach.Config{}), open(t, dsn, cockroach.Config{})
	ev := ledgertest.AI("k", ledgertest.Day, 42)
	ledgertest.MustRecord(t, a, ev)
	ledgertest.MustRecord(t, b, ev)
	ledgertest.AssertUsage(t, a, ledgertest.Day, billing.Usage{AIMicros: 42})
	ledgertest.AssertUsage(t, b, ledgertest.Day, billing.Usage{AIMicros: 42})
}

// Several processes starting at once against a new database create the schema once, and a restart
// migrates nothing and keeps the usage.
func TestConcurrentStartAndReopen(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgreSQL(t)
	errs := make(chan error, 4)
	for range cap(errs) {
		go func() {
			pool, err := cockroachdb.Open(ctx, dsn)
			if err != nil {
				errs <- err
				return
			}
			defer pool.Close()
			_, err = cockroach.New(ctx, cockroach.Config{Pool: pool})
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent New: %v", err)
		}
	}
	l := open(t, dsn, cockroach.Config{})
	ledgertest.MustRecord(t, l, ledgertest.Compute("c", ledgertest.Day, 7))
	l = open(t, dsn, cockroach.Config{})
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{ComputeSeconds: 7})
	ledgertest.MustRecord(t, l, ledgertest.Compute("c", ledgertest.Day, 7))
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{ComputeSeconds: 7})
	if v, err := cockroachdb.Version(ctx, openPool(t, dsn), "ledger"); err != nil || v != int64(len(cockroach.Migrations)) {
		t.Fatalf("ledger schema version %d, %v; want %d", v, err, len(cockroach.Migrations))
	}
}

// The stored form: window starts truncated to the second (the Unix epoch for lifetime), event times from
// the clock when unset — the same account keys and times billing/sqlite stores.
func TestStoredForm(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgreSQL(t)
	now := time.Date(2031, 5, 6, 7, 8, 9, 10_000, time.UTC)
	l := open(t, dsn, cockroach.Config{Now: func() time.Time { return now }})
	life := billing.Account{Issuer: "iss", User: "u", Window: billing.Lifetime}
	ledgertest.MustRecord(t, l, billing.UsageEvent{Key: "no-time", Account: ledgertest.Day, Kind: billing.KindAI, AIMicros: 1})
	ledgertest.MustRecord(t, l, ledgertest.AI("life", life, 2))
	// A start with a fraction of a second names the same account as the whole second.
	fraction := ledgertest.Day
	fraction.WindowStart = fraction.WindowStart.Add(300 * time.Millisecond)
	ledgertest.AssertUsage(t, l, fraction, billing.Usage{AIMicros: 1})

	pool := openPool(t, dsn)
	for _, tc := range []struct {
		key         string
		windowStart time.Time
		at          time.Time
	}{
		{"no-time", ledgertest.Start, now},
		{"life", time.Unix(0, 0), ledgertest.Start.Add(time.Minute)},
	} {
		t.Run(tc.key, func(t *testing.T) {
			var start, at time.Time
			if err := pool.QueryRow(ctx, `SELECT window_start, at FROM usage_events WHERE key = $1`, tc.key).Scan(&start, &at); err != nil {
				t.Fatal(err)
			}
			if !start.Equal(tc.windowStart) || !at.Equal(tc.at) {
				t.Fatalf("window_start, at = %v, %v; want %v, %v", start, at, tc.windowStart, tc.at)
			}
		})
	}
}

// A Reserve deletes the expired holds of its account (so the table does not grow with abandoned holds)
// and only those.
func TestExpiredHoldsSwept(t *testing.T) {
	dsn := testenv.PostgreSQL(t)
	clock := ledgertest.NewClock(ledgertest.Start.Add(time.Hour))
	l := open(t, dsn, cockroach.Config{Now: clock.Now})
	other := billing.Account{Issuer: "iss", User: "v", Window: billing.Day, WindowStart: ledgertest.Start}
	ledgertest.AssertGranted(t, l, "a", ledgertest.Day, 100, 10, 10)
	ledgertest.AssertGranted(t, l, "b", ledgertest.Day, 100, 10, 10)
	ledgertest.AssertGranted(t, l, "c", other, 100, 10, 10)
	clock.Advance(ledgertest.TTL)
	ledgertest.AssertGranted(t, l, "d", ledgertest.Day, 100, 10, 10)

	var ids string
	if err := openPool(t, dsn).QueryRow(context.Background(), `SELECT string_agg(id, ',' ORDER BY id) FROM holds`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if ids != "c,d" {
		t.Fatalf("holds after the sweep: %s, want c,d", ids)
	}
}

func TestReserveExceededSaysWhatRemains(t *testing.T) {
	l := open(t, testenv.PostgreSQL(t), cockroach.Config{})
	ledgertest.MustRecord(t, l, ledgertest.AI("used", ledgertest.Day, 400))
	ledgertest.AssertGranted(t, l, "a", ledgertest.Day, 1000, 600, 600)
	_, err := l.Reserve(context.Background(), "b", ledgertest.Day, 1000, 1, time.Minute)
	want := "reserve hold b for iss/u day from 2030-03-04T00:00:00Z: 0 of 1000 microdollars remain (used 400, held 600): budget exceeded"
	if err == nil || err.Error() != want {
		t.Fatalf("Reserve error:\n got %v\nwant %s", err, want)
	}
}

// A ledger whose pool is closed answers ErrUnavailable, after validating its input.
func TestClosedPoolIsUnavailable(t *testing.T) {
	ctx := context.Background()
	pool, err := cockroachdb.Open(ctx, testenv.PostgreSQL(t))
	if err != nil {
		t.Fatal(err)
	}
	l, err := cockroach.New(ctx, cockroach.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	assertUnavailable(t, l)
	if err := l.Record(ctx, billing.UsageEvent{}); !errors.Is(err, billing.ErrInvalid) {
		t.Errorf("Record invalid on closed pool: %v, want ErrInvalid", err)
	}
	if _, err := l.Reserve(ctx, "h", ledgertest.Day, 100, 0, time.Minute); !errors.Is(err, billing.ErrInvalid) {
		t.Errorf("Reserve invalid on closed pool: %v, want ErrInvalid", err)
	}
}

// assertUnavailable checks that every method fails with ErrUnavailable (and not with a budget error).
func assertUnavailable(t *testing.T, l *cockroach.Ledger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, billing.ErrUnavailable) || errors.Is(err, billing.ErrBudgetExceeded) {
			t.Errorf("%s: %v, want ErrUnavailable", op, err)
		}
	}
	_, err := l.Usage(ctx, ledgertest.Day)
	check("Usage", err)
	check("Record", l.Record(ctx, ledgertest.AI("down", ledgertest.Day, 1)))
	_, err = l.Reserve(ctx, "down", ledgertest.Day, 100, 10, time.Minute)
	check("Reserve", err)
	check("Settle", l.Settle(ctx, "down", ledgertest.AI("down", ledgertest.Day, 1)))
	check("Release", l.Release(ctx, "down"))
	check("Admit", billing.Admit(ctx, l, ledgertest.Day, billing.Budget{AIMicros: -1, ComputeSeconds: -1}))
}

// TestNewRejectsInvalidConfig: New without Pool fails at once, naming the missing field.
func TestNewRejectsInvalidConfig(t *testing.T) {
	_, err := cockroach.New(context.Background(), cockroach.Config{Now: time.Now})
	if err == nil || !strings.Contains(err.Error(), "open ledger: Config.Pool is required") {
		t.Fatalf("New without Pool: %v, want an error saying Config.Pool is required", err)
	}
}
