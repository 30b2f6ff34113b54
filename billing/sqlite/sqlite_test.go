package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/sqlitedb"
)

func open(t testing.TB, cfg sqlite.Config) *sqlite.Ledger {
	t.Helper()
	l, err := sqlite.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	return l
}

func TestContract(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) billing.Ledger {
		return open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	})
}

// Two ledgers on one file stand for a runner and its replay of spooled events in another process.
func TestTwoProcessesCountOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	a, b := open(t, sqlite.Config{Path: path}), open(t, sqlite.Config{Path: path})
	ev := ledgertest.AI("k", ledgertest.Day, 42)
	ledgertest.MustRecord(t, a, ev)
	ledgertest.MustRecord(t, b, ev)
	ledgertest.AssertUsage(t, a, ledgertest.Day, billing.Usage{AIMicros: 42})
	ledgertest.AssertUsage(t, b, ledgertest.Day, billing.Usage{AIMicros: 42})
}

func TestReopenKeepsUsage(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := sqlite.New(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.MustRecord(t, l, ledgertest.Compute("c", ledgertest.Day, 7))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open(t, sqlite.Config{Path: path})
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{ComputeSeconds: 7})
	ledgertest.MustRecord(t, l, ledgertest.Compute("c", ledgertest.Day, 7))
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{ComputeSeconds: 7})
}

func TestClosedIsUnavailable(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // Close is idempotent
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Usage(ctx, ledgertest.Day); !errors.Is(err, billing.ErrUnavailable) {
		t.Errorf("Usage on closed ledger: %v, want ErrUnavailable", err)
	}
	if err := l.Record(ctx, ledgertest.AI("k", ledgertest.Day, 1)); !errors.Is(err, billing.ErrUnavailable) {
		t.Errorf("Record on closed ledger: %v, want ErrUnavailable", err)
	}
	// Validation still comes first: a bad event is a caller bug, not an outage to spool through.
	if err := l.Record(ctx, billing.UsageEvent{}); !errors.Is(err, billing.ErrInvalid) {
		t.Errorf("Record invalid on closed ledger: %v, want ErrInvalid", err)
	}
}

// The stored form: window starts in Unix seconds (0 for lifetime), event times from the clock when unset.
func TestStoredForm(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	now := time.Date(2031, 5, 6, 7, 8, 9, 10, time.UTC)
	l := open(t, sqlite.Config{Path: path, Now: func() time.Time { return now }})
	life := billing.Account{Issuer: "iss", User: "u", Window: billing.Lifetime}
	ledgertest.MustRecord(t, l, billing.UsageEvent{Key: "no-time", Account: ledgertest.Day, Kind: billing.KindAI, AIMicros: 1})
	ledgertest.MustRecord(t, l, ledgertest.AI("life", life, 2))

	db, err := sqlitedb.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, tc := range []struct {
		key         string
		windowStart int64
		at          int64
	}{
		{"no-time", ledgertest.Start.Unix(), now.UnixNano()},
		{"life", 0, ledgertest.Start.Add(time.Minute).UnixNano()},
	} {
		t.Run(tc.key, func(t *testing.T) {
			var start, at int64
			err := db.QueryRowContext(ctx, `SELECT window_start, at FROM usage_events WHERE key = ?`, tc.key).Scan(&start, &at)
			if errors.Is(err, sql.ErrNoRows) {
				t.Fatal("event not stored")
			}
			if err != nil {
				t.Fatal(err)
			}
			if start != tc.windowStart || at != tc.at {
				t.Fatalf("window_start, at = %d, %d; want %d, %d", start, at, tc.windowStart, tc.at)
			}
		})
	}
}

// TestNewRejectsInvalidConfig: New without Path fails at once, naming the missing field.
func TestNewRejectsInvalidConfig(t *testing.T) {
	_, err := sqlite.New(context.Background(), sqlite.Config{Now: time.Now})
	if err == nil || !strings.Contains(err.Error(), "open ledger: Config.Path is required") {
		t.Fatalf("New without Path: %v, want an error saying Config.Path is required", err)
	}
}
