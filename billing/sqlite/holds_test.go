package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/sqlitedb"
)

func TestReserverContract(t *testing.T) {
	ledgertest.RunReserver(t, func(t *testing.T, clock *ledgertest.Clock) ledgertest.ReserverLedger {
		return open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db"), Now: clock.Now})
	})
}

// Two ledgers on one file stand for two LLM proxies in separate processes spending one user's budget.
func TestReserveRaceTwoProcesses(t *testing.T) {
	for seed := range uint64(2) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			clock := ledgertest.NewClock(ledgertest.Start.Add(time.Hour))
			ledgertest.ReserveRace(t, seed, open(t, sqlite.Config{Path: path, Now: clock.Now}), open(t, sqlite.Config{Path: path, Now: clock.Now}))
		})
	}
}

// A Reserve deletes the expired holds of its account (so the table does not grow with abandoned holds)
// and only those.
func TestExpiredHoldsSwept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	clock := ledgertest.NewClock(ledgertest.Start.Add(time.Hour))
	l := open(t, sqlite.Config{Path: path, Now: clock.Now})
	other := billing.Account{Issuer: "iss", User: "v", Window: billing.Day, WindowStart: ledgertest.Start}
	ledgertest.AssertGranted(t, l, "a", ledgertest.Day, 100, 10, 10)
	ledgertest.AssertGranted(t, l, "b", ledgertest.Day, 100, 10, 10)
	ledgertest.AssertGranted(t, l, "c", other, 100, 10, 10)
	clock.Advance(ledgertest.TTL)
	ledgertest.AssertGranted(t, l, "d", ledgertest.Day, 100, 10, 10)

	db, err := sqlitedb.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rows, err := db.Query(`SELECT id FROM holds ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(ids, ","), "c,d"; got != want {
		t.Fatalf("holds after the sweep: %s, want %s", got, want)
	}
}

func TestReserveExceededSaysWhatRemains(t *testing.T) {
	l := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	ledgertest.MustRecord(t, l, ledgertest.AI("used", ledgertest.Day, 400))
	ledgertest.AssertGranted(t, l, "a", ledgertest.Day, 1000, 600, 600)
	_, err := l.Reserve(context.Background(), "b", ledgertest.Day, 1000, 1, time.Minute)
	want := "reserve hold b for iss/u day from 2030-03-04T00:00:00Z: 0 of 1000 microdollars remain (used 400, held 600): budget exceeded"
	if err == nil || err.Error() != want {
		t.Fatalf("Reserve error:\n got %v\nwant %s", err, want)
	}
}

// A ledger file written before holds existed gains them on open and keeps its usage.
func TestMigrateAddsHolds(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sqlitedb.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlitedb.Migrate(ctx, db, "ledger", sqlite.Migrations[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO usage_totals (issuer, "user", "window", window_start, ai_micros, compute_seconds)
		VALUES ('iss', 'u', 'day', ?, 70, 3)`, ledgertest.Start.Unix()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	l := open(t, sqlite.Config{Path: path})
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 70, ComputeSeconds: 3})
	ledgertest.AssertGranted(t, l, "h", ledgertest.Day, 100, 50, 30)
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 70, ComputeSeconds: 3, HeldAIMicros: 30})
}

func TestReserverClosedIsUnavailable(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(ctx, "h", ledgertest.Day, 100, 10, time.Minute); !errors.Is(err, billing.ErrUnavailable) {
		t.Errorf("Reserve on closed ledger: %v, want ErrUnavailable", err)
	}
	if err := l.Settle(ctx, "h", ledgertest.AI("k", ledgertest.Day, 1)); !errors.Is(err, billing.ErrUnavailable) {
		t.Errorf("Settle on closed ledger: %v, want ErrUnavailable", err)
	}
	if err := l.Release(ctx, "h"); !errors.Is(err, billing.ErrUnavailable) {
		t.Errorf("Release on closed ledger: %v, want ErrUnavailable", err)
	}
	// Validation still comes first: a bad request is a caller bug, not an outage.
	if _, err := l.Reserve(ctx, "h", ledgertest.Day, 100, 0, time.Minute); !errors.Is(err, billing.ErrInvalid) {
		t.Errorf("Reserve invalid on closed ledger: %v, want ErrInvalid", err)
	}
}

// BenchmarkReserveSettle is the ledger's share of one model call: a Reserve and its Settle, from parallel
// callers on one account (the worst case: every transaction contends for the same rows).
func BenchmarkReserveSettle(b *testing.B) {
	ctx := context.Background()
	l := open(b, sqlite.Config{Path: filepath.Join(b.TempDir(), "ledger.db")})
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := strconv.FormatInt(seq.Add(1), 10)
			g, err := l.Reserve(ctx, id, ledgertest.Day, 1<<62, 1000, time.Minute)
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Settle(ctx, id, ledgertest.AI(id, ledgertest.Day, g/2)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReserveSerial is a model call's Reserve from one caller, as the model proxy makes it before
// the call's first byte (reserve-ns/op), followed by its Settle (outside that figure).
func BenchmarkReserveSerial(b *testing.B) {
	ctx := context.Background()
	l := open(b, sqlite.Config{Path: filepath.Join(b.TempDir(), "ledger.db")})
	var (
		n       int
		reserve time.Duration
	)
	b.ReportAllocs()
	for b.Loop() {
		n++
		id := strconv.Itoa(n)
		start := time.Now()
		g, err := l.Reserve(ctx, id, ledgertest.Day, 1<<62, 1000, time.Minute)
		reserve += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Settle(ctx, id, ledgertest.AI(id, ledgertest.Day, g/2)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(reserve.Nanoseconds())/float64(n), "reserve-ns/op")
}
