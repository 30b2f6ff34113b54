// Package ledgertest is the contract suite for billing.Ledger. Every adapter's tests call Run (litestream's
// RunWithReplicaClient pattern), so the embedded and production ledgers count usage the same way.
package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// Start is the window start the suite's day accounts use.
var Start = time.Date(2030, 3, 4, 0, 0, 0, 0, time.UTC)

// Day is the account most subtests record against.
var Day = billing.Account{Issuer: "iss", User: "u", Window: billing.Day, WindowStart: Start}

// Run runs the contract suite. open returns a new, empty ledger for each subtest and arranges its closing
// with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) billing.Ledger) {
	t.Helper()
	t.Run("EmptyUsageIsZero", func(t *testing.T) { AssertUsage(t, open(t), Day, billing.Usage{}) })
	t.Run("RecordThenUsage", func(t *testing.T) { testRecordThenUsage(t, open(t)) })
	t.Run("SameKeyCountsOnce", func(t *testing.T) { testSameKeyCountsOnce(t, open(t)) })
	t.Run("ConcurrentRedelivery", func(t *testing.T) { testConcurrentRedelivery(t, open(t)) })
	t.Run("AccountsIndependent", func(t *testing.T) { testAccountsIndependent(t, open(t)) })
	t.Run("InvalidRejected", func(t *testing.T) { testInvalidRejected(t, open(t)) })
	t.Run("Admit", func(t *testing.T) { testAdmit(t, open(t)) })
	t.Run("WindowRollsOverAtTheBoundary", func(t *testing.T) { testWindowRollover(t, open(t)) })
}

// testWindowRollover drives the clock across a day boundary of a token anchored at 09:30: up to the last
// nanosecond of the window the spent account refuses; at the boundary a new account admits, while the old
// one keeps what it spent.
func testWindowRollover(t *testing.T, l billing.Ledger) {
	ctx := context.Background()
	anchor := time.Date(2026, 11, 20, 9, 30, 0, 0, time.UTC)
	budget := billing.Budget{AIMicros: 1000, ComputeSeconds: -1}
	account := func(now time.Time) billing.Account {
		return billing.Account{Issuer: "iss", User: "roll", Window: billing.Day, WindowStart: billing.CurrentWindowStart(billing.Day, anchor, now)}
	}
	boundary := anchor.Add(48 * time.Hour) // the third window of the token
	last := boundary.Add(-time.Nanosecond)
	spent := account(last)
	if !spent.WindowStart.Equal(anchor.Add(24 * time.Hour)) {
		t.Fatalf("window at %s starts %s, want %s", last, spent.WindowStart, anchor.Add(24*time.Hour))
	}
	MustRecord(t, l, billing.UsageEvent{Key: "roll-1", Account: spent, Kind: billing.KindAI, Model: "claude", AIMicros: 1000, At: last})
	if err := billing.Admit(ctx, l, account(last), budget); !errors.Is(err, billing.ErrBudgetExceeded) {
		t.Fatalf("admit at %s (last instant of the spent window) = %v, want ErrBudgetExceeded", last, err)
	}
	next := account(boundary)
	if !next.WindowStart.Equal(boundary) {
		t.Fatalf("window at the boundary starts %s, want %s", next.WindowStart, boundary)
	}
	if err := billing.Admit(ctx, l, next, budget); err != nil {
		t.Fatalf("admit at the boundary %s = %v, want admitted (a new window)", boundary, err)
	}
	AssertUsage(t, l, next, billing.Usage{})
	AssertUsage(t, l, spent, billing.Usage{AIMicros: 1000})
}

// AI returns a valid model-usage event for acct.
func AI(key string, acct billing.Account, micros int64) billing.UsageEvent {
	return billing.UsageEvent{Key: key, Account: acct, Kind: billing.KindAI, Model: "claude", AIMicros: micros, At: Start.Add(time.Minute)}
}

// Compute returns a valid compute-time event for acct.
func Compute(key string, acct billing.Account, seconds int64) billing.UsageEvent {
	return billing.UsageEvent{Key: key, Account: acct, Kind: billing.KindCompute, ComputeSeconds: seconds, At: Start.Add(time.Minute)}
}

func testRecordThenUsage(t *testing.T, l billing.Ledger) {
	MustRecord(t, l, AI("a1", Day, 1500))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 1500})
	MustRecord(t, l, Compute("c1", Day, 30))
	MustRecord(t, l, AI("a2", Day, 250))
	MustRecord(t, l, Compute("c2", Day, 12))
	// An event may carry both amounts, and one without a time is stamped by the ledger.
	MustRecord(t, l, billing.UsageEvent{Key: "both", Account: Day, Kind: billing.KindAI, AIMicros: 1, ComputeSeconds: 1})
	// Zero amounts are valid (a call that cost nothing) and change nothing.
	MustRecord(t, l, AI("zero", Day, 0))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 1751, ComputeSeconds: 43})
}

func testSameKeyCountsOnce(t *testing.T, l billing.Ledger) {
	ev := AI("k", Day, 100)
	MustRecord(t, l, ev)
	MustRecord(t, l, ev)
	// A redelivery that differs (it should not) still does not count again: the first delivery wins.
	ev.AIMicros = 999
	MustRecord(t, l, ev)
	MustRecord(t, l, Compute("k", Day, 5))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 100})
}

func testConcurrentRedelivery(t *testing.T, l billing.Ledger) {
	const events, deliveries = 100, 3
	ctx := context.Background()
	var (
		wg   sync.WaitGroup
		want billing.Usage
		errs = make(chan error, events*deliveries)
	)
	for i := range events {
		ev := AI(fmt.Sprintf("ev-%d", i), Day, int64(i+1))
		if i%2 == 1 {
			ev = Compute(ev.Key, Day, int64(i))
		}
		want.AIMicros += ev.AIMicros
		want.ComputeSeconds += ev.ComputeSeconds
		for range deliveries {
			wg.Go(func() {
				if err := l.Record(ctx, ev); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	AssertUsage(t, l, Day, want)
}

func testAccountsIndependent(t *testing.T, l billing.Ledger) {
	accounts := []billing.Account{
		Day,
		{Issuer: "iss", User: "u", Window: billing.Day, WindowStart: Start.AddDate(0, 0, 1)},
		{Issuer: "iss", User: "u", Window: billing.Hour, WindowStart: Start},
		{Issuer: "iss", User: "u", Window: billing.Week, WindowStart: Start},
		{Issuer: "iss", User: "u", Window: billing.Month, WindowStart: Start},
		{Issuer: "iss", User: "u", Window: billing.Lifetime},
		{Issuer: "iss", User: "v", Window: billing.Day, WindowStart: Start},
		{Issuer: "iss2", User: "u", Window: billing.Day, WindowStart: Start},
		// Keys must not be built by naive concatenation: "is"+"su" vs "iss"+"u".
		{Issuer: "is", User: "su", Window: billing.Day, WindowStart: Start},
	}
	for i, a := range accounts {
		MustRecord(t, l, AI(fmt.Sprintf("ai-%d", i), a, int64(10*(i+1))))
		MustRecord(t, l, Compute(fmt.Sprintf("compute-%d", i), a, int64(i+1)))
	}
	for i, a := range accounts {
		AssertUsage(t, l, a, billing.Usage{AIMicros: int64(10 * (i + 1)), ComputeSeconds: int64(i + 1)})
	}
	// The same window start seen from another time zone is the same account.
	elsewhere := Day
	elsewhere.WindowStart = Start.In(time.FixedZone("UTC+5", 5*3600))
	AssertUsage(t, l, elsewhere, billing.Usage{AIMicros: 10, ComputeSeconds: 1})
}

func testInvalidRejected(t *testing.T, l billing.Ledger) {
	ctx := context.Background()
	with := func(f func(ev *billing.UsageEvent)) billing.UsageEvent {
		ev := AI("bad", Day, 10)
		f(&ev)
		return ev
	}
	for _, tc := range []struct {
		name string
		ev   billing.UsageEvent
	}{
		{"empty key", with(func(ev *billing.UsageEvent) { ev.Key = "" })},
		{"empty issuer", with(func(ev *billing.UsageEvent) { ev.Account.Issuer = "" })},
		{"empty user", with(func(ev *billing.UsageEvent) { ev.Account.User = "" })},
		{"unknown window", with(func(ev *billing.UsageEvent) { ev.Account.Window = "fortnight" })},
		{"empty window", with(func(ev *billing.UsageEvent) { ev.Account.Window = "" })},
		{"day without start", with(func(ev *billing.UsageEvent) { ev.Account.WindowStart = time.Time{} })},
		{"lifetime with start", with(func(ev *billing.UsageEvent) { ev.Account.Window = billing.Lifetime })},
		{"unknown kind", with(func(ev *billing.UsageEvent) { ev.Kind = "gpu" })},
		{"empty kind", with(func(ev *billing.UsageEvent) { ev.Kind = "" })},
		{"negative ai", with(func(ev *billing.UsageEvent) { ev.AIMicros = -1 })},
		{"negative compute", with(func(ev *billing.UsageEvent) { ev.ComputeSeconds = -1 })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := l.Record(ctx, tc.ev); !errors.Is(err, billing.ErrInvalid) {
				t.Fatalf("Record: %v, want ErrInvalid", err)
			}
		})
	}
	for _, a := range []billing.Account{
		{User: "u", Window: billing.Day, WindowStart: Start},
		{Issuer: "iss", Window: billing.Day, WindowStart: Start},
		{Issuer: "iss", User: "u", Window: "fortnight", WindowStart: Start},
		{Issuer: "iss", User: "u", Window: billing.Day},
		{Issuer: "iss", User: "u", Window: billing.Lifetime, WindowStart: Start},
	} {
		if _, err := l.Usage(ctx, a); !errors.Is(err, billing.ErrInvalid) {
			t.Errorf("Usage(%+v): %v, want ErrInvalid", a, err)
		}
	}
	AssertUsage(t, l, Day, billing.Usage{})
	AssertUsage(t, l, billing.Account{Issuer: "iss", User: "u", Window: billing.Lifetime}, billing.Usage{})
	// A rejected event does not use up its key.
	MustRecord(t, l, AI("bad", Day, 10))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 10})
}

func testAdmit(t *testing.T, l billing.Ledger) {
	ctx := context.Background()
	MustRecord(t, l, AI("a", Day, 100))
	MustRecord(t, l, Compute("c", Day, 60))
	fresh := billing.Account{Issuer: "iss", User: "fresh", Window: billing.Day, WindowStart: Start}
	for _, tc := range []struct {
		name   string
		acct   billing.Account
		budget billing.Budget
		admit  bool
	}{
		{"both below", Day, billing.Budget{AIMicros: 101, ComputeSeconds: 61}, true},
		{"ai reached", Day, billing.Budget{AIMicros: 100, ComputeSeconds: 61}, false},
		{"ai over", Day, billing.Budget{AIMicros: 50, ComputeSeconds: 61}, false},
		{"compute reached", Day, billing.Budget{AIMicros: 101, ComputeSeconds: 60}, false},
		{"both reached", Day, billing.Budget{AIMicros: 100, ComputeSeconds: 60}, false},
		{"unlimited", Day, billing.Budget{AIMicros: -1, ComputeSeconds: -1}, true},
		{"ai unlimited compute spent", Day, billing.Budget{AIMicros: -1, ComputeSeconds: 60}, false},
		{"compute unlimited ai spent", Day, billing.Budget{AIMicros: 100, ComputeSeconds: -1}, false},
		{"zero budget unused account", fresh, billing.Budget{AIMicros: 0, ComputeSeconds: -1}, false},
		{"zero compute unused account", fresh, billing.Budget{AIMicros: -1, ComputeSeconds: 0}, false},
		{"unused account", fresh, billing.Budget{AIMicros: 1, ComputeSeconds: 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := billing.Admit(ctx, l, tc.acct, tc.budget)
			switch {
			case tc.admit && err != nil:
				t.Fatalf("Admit: %v, want nil", err)
			case !tc.admit && !errors.Is(err, billing.ErrBudgetExceeded):
				t.Fatalf("Admit: %v, want ErrBudgetExceeded", err)
			}
		})
	}
	bad := Day
	bad.Window = "fortnight"
	if err := billing.Admit(ctx, l, bad, billing.Budget{AIMicros: -1, ComputeSeconds: -1}); !errors.Is(err, billing.ErrInvalid) {
		t.Errorf("Admit invalid account: %v, want ErrInvalid", err)
	}
}

// MustRecord records ev or fails the test.
func MustRecord(t testing.TB, l billing.Ledger, ev billing.UsageEvent) {
	t.Helper()
	if err := l.Record(context.Background(), ev); err != nil {
		t.Fatalf("Record(%s): %v", ev.Key, err)
	}
}

// AssertUsage checks the account's usage.
func AssertUsage(t testing.TB, l billing.Ledger, acct billing.Account, want billing.Usage) {
	t.Helper()
	got, err := l.Usage(context.Background(), acct)
	if err != nil {
		t.Fatalf("Usage(%+v): %v", acct, err)
	}
	if got != want {
		t.Fatalf("Usage(%s/%s %s %v) = %+v, want %+v", acct.Issuer, acct.User, acct.Window, acct.WindowStart, got, want)
	}
}
