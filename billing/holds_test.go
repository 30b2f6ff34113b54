package billing_test

import (
	"errors"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
)

func TestAccountSame(t *testing.T) {
	day := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	acct := billing.Account{Issuer: "acme", User: "alice", Window: billing.Day, WindowStart: day}
	life := billing.Account{Issuer: "acme", User: "alice", Window: billing.Lifetime}
	with := func(f func(*billing.Account)) billing.Account { a := acct; f(&a); return a }
	for _, tc := range []struct {
		name string
		a, b billing.Account
		want bool
	}{
		{"equal", acct, acct, true},
		{"start in another zone", acct, with(func(a *billing.Account) { a.WindowStart = day.In(time.FixedZone("X", -5*3600)) }), true},
		{"start within the second", acct, with(func(a *billing.Account) { a.WindowStart = day.Add(999 * time.Millisecond) }), true},
		{"start a second later", acct, with(func(a *billing.Account) { a.WindowStart = day.Add(time.Second) }), false},
		{"other issuer", acct, with(func(a *billing.Account) { a.Issuer = "other" }), false},
		{"other user", acct, with(func(a *billing.Account) { a.User = "bob" }), false},
		{"other window", acct, with(func(a *billing.Account) { a.Window = billing.Week }), false},
		{"lifetime", life, life, true},
		{"lifetime, start as the Unix epoch stored", life, billing.Account{Issuer: "acme", User: "alice", Window: billing.Lifetime, WindowStart: time.Unix(0, 0)}, true},
		{"lifetime and bounded", life, with(func(a *billing.Account) { a.WindowStart = time.Time{} }), false},
	} {
		if got := tc.a.Same(tc.b); got != tc.want {
			t.Errorf("%s: %v.Same(%v) = %v, want %v", tc.name, tc.a, tc.b, got, tc.want)
		}
		if got := tc.b.Same(tc.a); got != tc.want {
			t.Errorf("%s: %v.Same(%v) = %v, want %v (symmetric)", tc.name, tc.b, tc.a, got, tc.want)
		}
	}
}

// A hold found under the id of a Reserve or a Settle must be of the caller's account; otherwise ErrInvalid,
// naming the hold's account.
func TestCheckHold(t *testing.T) {
	day := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	acct := billing.Account{Issuer: "acme", User: "alice", Window: billing.Day, WindowStart: day}
	other := billing.Account{Issuer: "acme", User: "bob", Window: billing.Day, WindowStart: day}
	if err := billing.CheckReserveHold(acct, acct); err != nil {
		t.Errorf("CheckReserveHold of the same account: %v", err)
	}
	if err := billing.CheckSettleHold(acct, acct); err != nil {
		t.Errorf("CheckSettleHold of the same account: %v", err)
	}
	err := billing.CheckReserveHold(acct, other)
	if want := "id already holds budget of acme/bob day: invalid ledger input"; !errors.Is(err, billing.ErrInvalid) || err.Error() != want {
		t.Errorf("CheckReserveHold of another account = %v, want %q", err, want)
	}
	err = billing.CheckSettleHold(other, acct)
	if want := "hold is of acme/bob day, event of acme/alice day from 2026-11-23T00:00:00Z: invalid ledger input"; !errors.Is(err, billing.ErrInvalid) || err.Error() != want {
		t.Errorf("CheckSettleHold of another account = %v, want %q", err, want)
	}
}

func TestCapLimit(t *testing.T) {
	for _, tc := range []struct {
		limit, quota int64
		found        bool
		want         int64
	}{
		{limit: 100, want: 100},                          // no quota stored
		{limit: -1, want: -1},                            // no quota, unlimited caller
		{limit: 100, quota: 5, want: 100},                // a quota not found does not count
		{limit: 100, quota: 40, found: true, want: 40},   // a cut
		{limit: 100, quota: 0, found: true, want: 0},     // a quota of nothing
		{limit: 100, quota: 400, found: true, want: 100}, // a raise never lifts the caller's limit
		{limit: 100, quota: 100, found: true, want: 100}, // equal
		{limit: 100, quota: -1, found: true, want: 100},  // an unlimited quota leaves the limit
		{limit: -1, quota: 40, found: true, want: 40},    // an unlimited caller is capped
		{limit: -1, quota: -1, found: true, want: -1},    // both unlimited
		{limit: 0, quota: 40, found: true, want: 0},      // a caller with nothing stays so
		{limit: 1 << 62, quota: 1<<62 - 1, found: true, want: 1<<62 - 1},
	} {
		if got := billing.CapLimit(tc.limit, tc.quota, tc.found); got != tc.want {
			t.Errorf("CapLimit(%d, %d, %v) = %d, want %d", tc.limit, tc.quota, tc.found, got, tc.want)
		}
	}
}

func TestGrant(t *testing.T) {
	for _, tc := range []struct {
		limit, want, used, held int64
		granted                 int64
		err                     string
	}{
		{limit: -1, want: 50, granted: 50},
		{limit: -1, want: 50, used: 1 << 40, held: 1 << 40, granted: 50}, // unlimited ignores usage
		{limit: 100, want: 50, granted: 50},
		{limit: 100, want: 50, used: 30, held: 10, granted: 50},
		{limit: 100, want: 50, used: 30, held: 30, granted: 40}, // capped by what remains
		{limit: 100, want: 50, used: 99, granted: 1},
		{limit: 100, want: 50, used: 60, held: 40, err: "0 of 100 microdollars remain (used 60, held 40): budget exceeded"},
		{limit: 100, want: 50, used: 150, err: "0 of 100 microdollars remain (used 150, held 0): budget exceeded"},
		{limit: 0, want: 1, err: "0 of 0 microdollars remain (used 0, held 0): budget exceeded"},
	} {
		got, err := billing.Grant(tc.limit, tc.want, tc.used, tc.held)
		switch {
		case tc.err == "" && (err != nil || got != tc.granted):
			t.Errorf("Grant(%d, %d, %d, %d) = %d, %v; want %d", tc.limit, tc.want, tc.used, tc.held, got, err, tc.granted)
		case tc.err != "" && (got != 0 || !errors.Is(err, billing.ErrBudgetExceeded) || err.Error() != tc.err):
			t.Errorf("Grant(%d, %d, %d, %d) = %d, %v; want 0, %q", tc.limit, tc.want, tc.used, tc.held, got, err, tc.err)
		}
	}
}

// FuzzGrant checks Reserve's arithmetic on any amounts the ledgers can store (non-negative usage and holds,
// want > 0 as ValidateReserve requires, all below 2^61 so nothing overflows): the capped limit is never
// above the caller's limit nor the quota when either is limited; the grant never takes used + held above
// it, is positive and at most want, and is refused exactly when nothing remains.
func FuzzGrant(f *testing.F) {
	f.Add(int64(100), int64(40), true, int64(50), int64(30), int64(30))
	f.Add(int64(-1), int64(-1), true, int64(50), int64(0), int64(0))
	f.Add(int64(-1), int64(10), true, int64(50), int64(5), int64(5))
	f.Add(int64(100), int64(0), false, int64(50), int64(60), int64(40))
	f.Fuzz(func(t *testing.T, limit, quota int64, found bool, want, used, held int64) {
		const bound = 1 << 61
		limit, quota = limit%bound, quota%bound
		if limit < 0 {
			limit = -1
		}
		if quota < 0 {
			quota = -1
		}
		want, used, held = 1+abs(want%bound), abs(used%bound), abs(held%bound)

		c := billing.CapLimit(limit, quota, found)
		switch {
		case c != limit && !(found && c == quota):
			t.Fatalf("CapLimit(%d, %d, %v) = %d, neither", limit, quota, found, c)
		case limit >= 0 && (c < 0 || c > limit):
			t.Fatalf("CapLimit(%d, %d, %v) = %d, above the caller's limit", limit, quota, found, c)
		case found && quota >= 0 && (c < 0 || c > quota):
			t.Fatalf("CapLimit(%d, %d, %v) = %d, above the quota", limit, quota, found, c)
		case (!found || quota < 0) && c != limit:
			t.Fatalf("CapLimit(%d, %d, %v) = %d, want the caller's limit", limit, quota, found, c)
		}

		g, err := billing.Grant(c, want, used, held)
		switch {
		case c < 0:
			if err != nil || g != want {
				t.Fatalf("unlimited Grant(%d, %d, %d, %d) = %d, %v; want %d", c, want, used, held, g, err, want)
			}
		case used+held >= c:
			if g != 0 || !errors.Is(err, billing.ErrBudgetExceeded) {
				t.Fatalf("Grant(%d, %d, %d, %d) = %d, %v; want ErrBudgetExceeded", c, want, used, held, g, err)
			}
		default:
			if err != nil || g <= 0 || g > want || used+held+g > c || (g < want && used+held+g != c) {
				t.Fatalf("Grant(%d, %d, %d, %d) = %d, %v", c, want, used, held, g, err)
			}
		}
	})
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
