package billing_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/billing/sqlite"
)

func openLedger(t testing.TB) *sqlite.Ledger {
	t.Helper()
	l, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestAdmit(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t)
	acct := ledgertest.Day
	ledgertest.MustRecord(t, l, ledgertest.AI("a", acct, 500))
	ledgertest.MustRecord(t, l, ledgertest.Compute("c", acct, 30))
	for _, tc := range []struct {
		name    string
		budget  billing.Budget
		wantErr bool
		mention []string // dimensions the error names
		silent  []string // dimensions it must not name
	}{
		{"room in both", billing.Budget{AIMicros: 501, ComputeSeconds: 31}, false, nil, nil},
		{"unlimited", billing.Budget{AIMicros: -1, ComputeSeconds: -1}, false, nil, nil},
		{"ai spent", billing.Budget{AIMicros: 500, ComputeSeconds: -1}, true, []string{"ai 500 of 500"}, []string{"compute"}},
		{"compute spent", billing.Budget{AIMicros: 1000, ComputeSeconds: 30}, true, []string{"compute 30 of 30"}, []string{"ai "}},
		{"both spent", billing.Budget{AIMicros: 10, ComputeSeconds: 10}, true, []string{"ai 500 of 10", "compute 30 of 10"}, nil},
		{"zero allowance", billing.Budget{AIMicros: 0, ComputeSeconds: 0}, true, []string{"ai 500 of 0", "compute 30 of 0"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := billing.Admit(ctx, l, acct, tc.budget)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("Admit: %v", err)
				}
				return
			}
			if !errors.Is(err, billing.ErrBudgetExceeded) {
				t.Fatalf("Admit: %v, want ErrBudgetExceeded", err)
			}
			for _, m := range tc.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not name %q", err, m)
				}
			}
			for _, m := range tc.silent {
				if strings.Contains(err.Error(), m) {
					t.Errorf("error %q names %q", err, m)
				}
			}
		})
	}
}

func TestAdmitUnavailable(t *testing.T) {
	l := openLedger(t)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Even an unlimited budget is refused: a new session must not start on a ledger nobody can reach.
	err := billing.Admit(context.Background(), l, ledgertest.Day, billing.Budget{AIMicros: -1, ComputeSeconds: -1})
	if !errors.Is(err, billing.ErrUnavailable) {
		t.Fatalf("Admit on closed ledger: %v, want ErrUnavailable", err)
	}
	if errors.Is(err, billing.ErrBudgetExceeded) {
		t.Fatalf("Admit on closed ledger claims the budget is spent: %v", err)
	}
}

func TestWindowStart(t *testing.T) {
	// 2030-03-07 is a Thursday.
	at := time.Date(2030, 3, 7, 13, 45, 30, 500, time.FixedZone("UTC-8", -8*3600)) // 21:45:30 UTC
	for _, tc := range []struct {
		w    billing.Window
		t    time.Time
		want time.Time
	}{
		{billing.Hour, at, time.Date(2030, 3, 7, 21, 0, 0, 0, time.UTC)},
		{billing.Day, at, time.Date(2030, 3, 7, 0, 0, 0, 0, time.UTC)},
		{billing.Week, at, time.Date(2030, 3, 4, 0, 0, 0, 0, time.UTC)},
		{billing.Month, at, time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC)},
		{billing.Lifetime, at, time.Time{}},
		{"fortnight", at, time.Time{}},
		// Local time is past midnight but UTC is still the previous day.
		{billing.Day, time.Date(2030, 3, 8, 1, 0, 0, 0, time.FixedZone("UTC+3", 3*3600)), time.Date(2030, 3, 7, 0, 0, 0, 0, time.UTC)},
		// Monday itself, and Sunday belonging to the week before.
		{billing.Week, time.Date(2030, 3, 4, 0, 0, 0, 0, time.UTC), time.Date(2030, 3, 4, 0, 0, 0, 0, time.UTC)},
		{billing.Week, time.Date(2030, 3, 10, 23, 59, 59, 0, time.UTC), time.Date(2030, 3, 4, 0, 0, 0, 0, time.UTC)},
		// Weeks and months across year ends.
		{billing.Week, time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC), time.Date(2029, 12, 31, 0, 0, 0, 0, time.UTC)},
		{billing.Week, time.Date(2031, 1, 4, 12, 0, 0, 0, time.UTC), time.Date(2030, 12, 30, 0, 0, 0, 0, time.UTC)},
		{billing.Month, time.Date(2030, 12, 31, 23, 59, 59, 0, time.UTC), time.Date(2030, 12, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(string(tc.w)+"/"+tc.t.Format(time.RFC3339), func(t *testing.T) {
			got := billing.WindowStart(tc.w, tc.t)
			if !got.Equal(tc.want) || got.Location() != time.UTC {
				t.Fatalf("WindowStart(%s, %v) = %v, want %v UTC", tc.w, tc.t, got, tc.want)
			}
		})
	}
}

func TestWindowValid(t *testing.T) {
	for _, w := range []billing.Window{billing.Hour, billing.Day, billing.Week, billing.Month, billing.Lifetime} {
		if !w.Valid() {
			t.Errorf("%q not valid", w)
		}
	}
	for _, w := range []billing.Window{"", "fortnight", "Day"} {
		if w.Valid() {
			t.Errorf("%q valid", w)
		}
	}
}

func TestCurrentWindowStart(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		w           billing.Window
		anchor, now string
		want        string
	}{
		{billing.Hour, "2026-11-22T10:15:00Z", "2026-11-22T10:15:00Z", "2026-11-22T10:15:00Z"},
		{billing.Hour, "2026-11-22T10:15:00Z", "2026-11-22T11:14:59.999999999Z", "2026-11-22T10:15:00Z"},
		{billing.Hour, "2026-11-22T10:15:00Z", "2026-11-22T11:15:00Z", "2026-11-22T11:15:00Z"},
		{billing.Day, "2026-11-20T09:30:00Z", "2026-11-22T09:29:59Z", "2026-11-21T09:30:00Z"},
		{billing.Day, "2026-11-20T09:30:00Z", "2026-11-22T09:30:00Z", "2026-11-22T09:30:00Z"},
		{billing.Week, "2026-11-16T00:00:00Z", "2026-11-29T23:59:59Z", "2026-11-23T00:00:00Z"},
		{billing.Week, "2026-11-16T00:00:00Z", "2026-11-30T00:00:00Z", "2026-11-30T00:00:00Z"},
		{billing.Month, "2026-01-31T12:00:00Z", "2026-02-28T11:59:59Z", "2026-01-31T12:00:00Z"},
		{billing.Month, "2026-01-31T12:00:00Z", "2026-02-28T12:00:00Z", "2026-02-28T12:00:00Z"}, // clamped to February's last day
		{billing.Month, "2026-01-31T12:00:00Z", "2026-03-30T00:00:00Z", "2026-02-28T12:00:00Z"},
		{billing.Month, "2026-01-31T12:00:00Z", "2026-03-31T12:00:00Z", "2026-03-31T12:00:00Z"},
		{billing.Month, "2024-01-31T00:00:00Z", "2024-02-29T00:00:00Z", "2024-02-29T00:00:00Z"}, // leap year
		{billing.Month, "2025-12-15T00:00:00Z", "2026-01-14T23:59:59Z", "2025-12-15T00:00:00Z"},
		{billing.Month, "2025-12-15T00:00:00Z", "2027-01-15T00:00:00Z", "2027-01-15T00:00:00Z"},
		{billing.Day, "2026-11-22T00:00:00Z", "2026-11-21T00:00:00Z", "2026-11-22T00:00:00Z"}, // before the anchor
		{billing.Lifetime, "0001-01-01T00:00:00Z", "2026-11-22T00:00:00Z", "0001-01-01T00:00:00Z"},
	} {
		got := billing.CurrentWindowStart(tc.w, at(tc.anchor), at(tc.now))
		if !got.Equal(at(tc.want)) {
			t.Errorf("CurrentWindowStart(%s, %s, %s) = %s, want %s", tc.w, tc.anchor, tc.now, got.Format(time.RFC3339Nano), tc.want)
		}
	}
}

// FuzzCurrentWindowStart: the window returned contains now and starts a whole number of periods after the
// anchor (never in the future, never more than one period back).
func FuzzCurrentWindowStart(f *testing.F) {
	f.Add(int64(1763800000), int64(86400*45+17), uint8(2))
	f.Add(int64(1769860800), int64(86400*400), uint8(4))
	f.Fuzz(func(t *testing.T, anchorUnix, delta int64, kind uint8) {
		windows := []billing.Window{billing.Hour, billing.Day, billing.Week, billing.Month}
		w := windows[int(kind)%len(windows)]
		anchorUnix = anchorUnix % (1 << 34) // years 1970–2514
		if anchorUnix < 0 {
			anchorUnix = -anchorUnix
		}
		delta = delta % (1 << 31)
		if delta < 0 {
			delta = -delta
		}
		anchor := time.Unix(anchorUnix, 0).UTC()
		now := anchor.Add(time.Duration(delta) * time.Second)
		got := billing.CurrentWindowStart(w, anchor, now)
		if got.After(now) || got.Before(anchor) {
			t.Fatalf("%s window of anchor %s at %s starts %s", w, anchor, now, got)
		}
		var next time.Time
		if w == billing.Month {
			next = billing.CurrentWindowStart(w, anchor, got.AddDate(0, 1, 3))
		} else {
			period := map[billing.Window]time.Duration{billing.Hour: time.Hour, billing.Day: 24 * time.Hour, billing.Week: 7 * 24 * time.Hour}[w]
			if got.Sub(anchor)%period != 0 {
				t.Fatalf("start %s is not a whole number of %s periods after %s", got, w, anchor)
			}
			next = got.Add(period)
		}
		if !next.After(now) {
			t.Fatalf("%s window of anchor %s at %s starts %s, but the next (%s) has begun", w, anchor, now, got, next)
		}
		// The reset time the budget errors announce is the next window's start.
		if reset := billing.NextWindowStart(w, anchor, now); !reset.After(now) || !billing.CurrentWindowStart(w, anchor, reset).Equal(reset) ||
			!billing.CurrentWindowStart(w, anchor, reset.Add(-time.Second)).Equal(got) {
			t.Fatalf("%s window of anchor %s at %s (from %s) resets at %s", w, anchor, now, got, reset)
		}
	})
}

func TestNextWindowStart(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		w                 billing.Window
		anchor, now, want string
	}{
		{billing.Hour, "2026-11-22T10:15:00Z", "2026-11-22T10:15:00Z", "2026-11-22T11:15:00Z"},
		{billing.Day, "2026-11-20T09:30:00Z", "2026-11-22T09:29:59Z", "2026-11-22T09:30:00Z"},
		{billing.Week, "2026-11-16T00:00:00Z", "2026-11-29T23:59:59Z", "2026-11-30T00:00:00Z"},
		{billing.Month, "2026-01-31T12:00:00Z", "2026-02-28T12:00:00Z", "2026-03-31T12:00:00Z"}, // from the anchor, not from Feb 28
		{billing.Month, "2026-01-31T12:00:00Z", "2026-01-01T00:00:00Z", "2026-02-28T12:00:00Z"}, // before the anchor
		{billing.Day, "2026-11-22T00:00:00Z", "2026-11-21T00:00:00Z", "2026-11-23T00:00:00Z"},
		{billing.Lifetime, "0001-01-01T00:00:00Z", "2026-11-22T00:00:00Z", "0001-01-01T00:00:00Z"}, // never
	} {
		if got := billing.NextWindowStart(tc.w, at(tc.anchor), at(tc.now)); !got.Equal(at(tc.want)) {
			t.Errorf("NextWindowStart(%s, %s, %s) = %s, want %s", tc.w, tc.anchor, tc.now, got.Format(time.RFC3339), tc.want)
		}
	}
}

// A spent budget is a *BudgetError saying which part, used of its limit, the window and its reset, in
// words and in details; it still wraps ErrBudgetExceeded.
func TestBudgetError(t *testing.T) {
	start := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	acct := billing.Account{Issuer: "dev", User: "alice", Window: billing.Day, WindowStart: start}
	if err := billing.CheckUsage(acct, billing.Usage{AIMicros: 1_999_999, ComputeSeconds: 599}, billing.Budget{AIMicros: 2_000_000, ComputeSeconds: 600}); err != nil {
		t.Fatalf("under the budget: %v", err)
	}
	err := billing.CheckUsage(acct, billing.Usage{AIMicros: 10, ComputeSeconds: 600}, billing.Budget{AIMicros: 2_000_000, ComputeSeconds: 600})
	var be *billing.BudgetError
	if !errors.As(err, &be) || !errors.Is(err, billing.ErrBudgetExceeded) || be.AI || !be.Compute {
		t.Fatalf("compute spent: %#v", err)
	}
	be.ResetsAt = start.AddDate(0, 0, 1)
	want := "the compute budget of this day is spent: 600 of 600 sandbox seconds used (window from 2026-11-29T00:00:00Z; resets at 2026-11-30T00:00:00Z)"
	if got := be.Describe(); got != want {
		t.Fatalf("Describe:\n got %q\nwant %q", got, want)
	}
	d := be.Details()
	if b, _ := d["budgets"].([]string); len(b) != 1 || b[0] != "compute" || d["compute_limit_seconds"] != int64(600) || d["compute_used_seconds"] != int64(600) ||
		d["window"] != "day" || d["resets_at"] != "2026-11-30T00:00:00Z" || d["window_start"] != "2026-11-29T00:00:00Z" || d["ai_limit_microdollars"] != nil {
		t.Fatalf("details %v", d)
	}

	life := billing.Account{Issuer: "dev", User: "bob", Window: billing.Lifetime}
	err = billing.CheckUsage(life, billing.Usage{AIMicros: 2_500_000}, billing.Budget{AIMicros: 2_000_000, ComputeSeconds: -1})
	if !errors.As(err, &be) || !be.AI || be.Compute {
		t.Fatalf("ai spent: %#v", err)
	}
	if got := be.Describe(); got != "the AI budget of this user is spent: $2.500000 of $2.000000 used (a lifetime budget: it does not reset; raise the quota or mint a larger budget)" {
		t.Fatalf("Describe: %q", got)
	}
	if d := be.Details(); d["resets_at"] != nil || d["window"] != "lifetime" || d["ai_used_microdollars"] != int64(2_500_000) {
		t.Fatalf("details %v", d)
	}
}
