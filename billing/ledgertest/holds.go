package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// ReserverLedger is a ledger that also holds budget, as the LLM proxy uses it.
type ReserverLedger interface {
	billing.Ledger
	billing.Reserver
}

// Clock is a fake clock that moves only when told to, so hold expiry is tested without sleeping. Adapters
// read it through Now (sqlite.Config{Now: c.Now}). Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading now.
func NewClock(now time.Time) *Clock { return &Clock{now: now} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TTL is how long the suite's holds live.
const TTL = time.Minute

// Racers is how many goroutines ReserveRace sets against one account's limit.
const Racers = 200

// RunReserver runs the contract suite of billing.Reserver. open returns a new, empty ledger for each subtest
// whose expiry follows clock (a fresh one per subtest, reading an hour into Day's window), and arranges its
// closing with t.Cleanup.
func RunReserver(t *testing.T, open func(t *testing.T, clock *Clock) ReserverLedger) {
	t.Helper()
	fresh := func(t *testing.T) (ReserverLedger, *Clock) {
		c := NewClock(Start.Add(time.Hour))
		return open(t, c), c
	}
	t.Run("GrantUpToRemaining", func(t *testing.T) { l, _ := fresh(t); testGrantUpToRemaining(t, l) })
	t.Run("ExceededWhenNothingRemains", func(t *testing.T) { testExceeded(t, func() ReserverLedger { l, _ := fresh(t); return l }) })
	t.Run("IdempotentReserve", func(t *testing.T) { l, c := fresh(t); testIdempotentReserve(t, l, c) })
	t.Run("SettleRecordsOnceAndFrees", func(t *testing.T) { l, _ := fresh(t); testSettle(t, l) })
	t.Run("ReleaseFrees", func(t *testing.T) { l, _ := fresh(t); testRelease(t, l) })
	t.Run("ExpiredHoldReleased", func(t *testing.T) { l, c := fresh(t); testExpiry(t, l, c) })
	t.Run("Unlimited", func(t *testing.T) { l, _ := fresh(t); testUnlimited(t, l) })
	t.Run("AccountsIndependent", func(t *testing.T) { l, _ := fresh(t); testHoldAccountsIndependent(t, l) })
	t.Run("InvalidRejected", func(t *testing.T) { l, _ := fresh(t); testReserverInvalid(t, l) })
	t.Run("QuotaCapsLimit", func(t *testing.T) {
		l, _ := fresh(t)
		q, ok := l.(quotaLedger)
		if !ok {
			t.Skip("the ledger stores no quotas")
		}
		testQuotaCapsLimit(t, q)
	})
	t.Run("ConcurrentReserveSettle", func(t *testing.T) {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { l, _ := fresh(t); ReserveRace(t, seed, l) })
		}
	})
}

// quotaLedger is a ledger whose database also holds the admin store's issuers and quotas.
type quotaLedger interface {
	ReserverLedger
	billing.Issuers
	billing.Quotas
}

// A quota written after the caller was admitted caps the limit it reserves under, at the next Reserve:
// the user's override when there is one, else the issuer's default; cuts take effect at once, raises
// never lift the caller's own limit.
func testQuotaCapsLimit(t *testing.T, l quotaLedger) {
	ctx := context.Background()
	if _, err := l.PutIssuer(ctx, Day.Issuer, "Issuer"); err != nil {
		t.Fatal(err)
	}
	put := func(user string, ai, rev int64) {
		t.Helper()
		q := billing.Quota{AIMicros: ai, ComputeSeconds: -1, Window: billing.Day, MaxConcurrentSessions: -1}
		if _, err := l.PutQuota(ctx, billing.QuotaKey{Issuer: Day.Issuer, User: user}, q, rev); err != nil {
			t.Fatal(err)
		}
	}
	const limit = 5000 // what the caller was admitted with
	MustRecord(t, l, AI("used", Day, 1000))
	AssertGranted(t, l, "a", Day, limit, 500, 500)
	put("", 1200, 0) // the issuer's default is cut below what is used and held
	AssertExceeded(t, l, "b", Day, limit, 1)
	other := Day
	other.User = "other-user"
	AssertGranted(t, l, "o", other, limit, 700, 700) // 1200 for another user too, who used nothing
	put(Day.User, 3000, 0)                           // the user's override wins over the default
	AssertGranted(t, l, "c", Day, limit, 5000, 1500)
	put(Day.User, -1, 1) // unlimited quota: the caller's own limit stands
	AssertGranted(t, l, "d", Day, limit, 5000, 2000)
	AssertExceeded(t, l, "e", Day, limit, 1)
	put(Day.User, 0, 2) // nothing at all: unlimited callers stop too
	AssertExceeded(t, l, "f", Day, -1, 1)
}

func testGrantUpToRemaining(t *testing.T, l ReserverLedger) {
	const limit = 1000
	MustRecord(t, l, AI("used", Day, 300))
	MustRecord(t, l, Compute("compute", Day, 1_000_000)) // compute time is not AI budget
	AssertGranted(t, l, "a", Day, limit, 500, 500)
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 300, ComputeSeconds: 1_000_000, HeldAIMicros: 500})
	AssertGranted(t, l, "b", Day, limit, 500, 200) // only 200 remain: a partial grant
	AssertExceeded(t, l, "c", Day, limit, 1)
	MustRelease(t, l, "a")
	AssertGranted(t, l, "c", Day, limit, 1000, 500)
	MustSettle(t, l, "b", AI("b", Day, 150)) // the call cost less than held: the rest is free again
	AssertGranted(t, l, "d", Day, limit, 100, 50)
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 450, ComputeSeconds: 1_000_000, HeldAIMicros: 550})
}

func testExceeded(t *testing.T, fresh func() ReserverLedger) {
	for _, tc := range []struct {
		name        string
		limit, used int64
		held        int64
	}{
		{"zero limit", 0, 0, 0},
		{"used reaches limit", 100, 100, 0},
		{"used beyond limit", 100, 150, 0},
		{"used and held reach limit", 100, 40, 60},
		{"held reaches limit", 100, 0, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := fresh()
			if tc.used > 0 {
				MustRecord(t, l, AI("used", Day, tc.used))
			}
			if tc.held > 0 {
				AssertGranted(t, l, "held", Day, tc.limit, tc.held, tc.held)
			}
			AssertExceeded(t, l, "h", Day, tc.limit, 1)
			AssertUsage(t, l, Day, billing.Usage{AIMicros: tc.used, HeldAIMicros: tc.held})
			// A refused id is not used up: with room, the same id is granted.
			AssertGranted(t, l, "h", Day, tc.used+tc.held+7, 10, 7)
		})
	}
}

func testIdempotentReserve(t *testing.T, l ReserverLedger, clock *Clock) {
	const limit = 1000
	AssertGranted(t, l, "h", Day, limit, 400, 400)
	// A retry (its answer was lost) gets the first grant again, whatever it asks now, and holds nothing more.
	AssertGranted(t, l, "h", Day, limit, 400, 400)
	AssertGranted(t, l, "h", Day, limit, 900, 400)
	AssertUsage(t, l, Day, billing.Usage{HeldAIMicros: 400})
	// Even once the rest is held by others and the hold has aged (but not expired).
	AssertGranted(t, l, "other", Day, limit, 1000, 600)
	clock.Advance(TTL - time.Second)
	AssertGranted(t, l, "h", Day, limit, 400, 400)
	AssertUsage(t, l, Day, billing.Usage{HeldAIMicros: 1000})
	// An id names one hold: reusing it for another account is a caller bug.
	other := billing.Account{Issuer: "iss", User: "v", Window: billing.Day, WindowStart: Start}
	if g, err := l.Reserve(context.Background(), "h", other, limit, 10, TTL); !errors.Is(err, billing.ErrInvalid) {
		t.Fatalf("Reserve(h) for another account = %d, %v; want ErrInvalid", g, err)
	}
	AssertUsage(t, l, other, billing.Usage{})
}

func testSettle(t *testing.T, l ReserverLedger) {
	const limit = 1000
	AssertGranted(t, l, "h", Day, limit, 500, 500)
	AssertGranted(t, l, "k", Day, limit, 100, 100)
	MustSettle(t, l, "h", AI("call-1", Day, 320))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 320, HeldAIMicros: 100})
	// Settling twice (a retry) counts once and frees nothing more.
	MustSettle(t, l, "h", AI("call-1", Day, 320))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 320, HeldAIMicros: 100})
	// The event's key, not the hold, makes it idempotent: the usage is in the ledger like any other.
	MustRecord(t, l, AI("call-1", Day, 320))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 320, HeldAIMicros: 100})
	// A hold that is gone (never existed here) still records its event, once.
	MustSettle(t, l, "gone", AI("call-2", Day, 30))
	MustSettle(t, l, "gone", AI("call-2", Day, 30))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 350, HeldAIMicros: 100})
	// The real cost may exceed the hold (the estimate was wrong); the ledger records what was spent.
	MustSettle(t, l, "k", AI("call-3", Day, 700))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 1050})
	AssertExceeded(t, l, "next", Day, limit, 1)
	// An event of another account than the hold's is refused and neither records nor frees.
	AssertGranted(t, l, "m", Day, 2000, 10, 10)
	other := AI("call-4", billing.Account{Issuer: "iss", User: "v", Window: billing.Day, WindowStart: Start}, 5)
	if err := l.Settle(context.Background(), "m", other); !errors.Is(err, billing.ErrInvalid) {
		t.Fatalf("Settle(m) with another account's event: %v, want ErrInvalid", err)
	}
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 1050, HeldAIMicros: 10})
	AssertUsage(t, l, other.Account, billing.Usage{})
}

func testRelease(t *testing.T, l ReserverLedger) {
	const limit = 1000
	AssertGranted(t, l, "h", Day, limit, 1000, 1000)
	AssertExceeded(t, l, "k", Day, limit, 1)
	MustRelease(t, l, "h")
	AssertUsage(t, l, Day, billing.Usage{})
	MustRelease(t, l, "h")       // twice
	MustRelease(t, l, "unknown") // never held
	AssertGranted(t, l, "k", Day, limit, 1000, 1000)
	// Settling a released hold still records its usage.
	MustSettle(t, l, "h", AI("late", Day, 5))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 5, HeldAIMicros: 1000})
}

func testExpiry(t *testing.T, l ReserverLedger, clock *Clock) {
	const limit = 1000
	AssertGranted(t, l, "old", Day, limit, 600, 600)
	AssertGranted(t, l, "settled-late", Day, limit, 100, 100)
	clock.Advance(TTL - time.Second)
	AssertUsage(t, l, Day, billing.Usage{HeldAIMicros: 700})
	AssertGranted(t, l, "young", Day, limit, 200, 200) // expires a second after the others
	clock.Advance(time.Second)                         // old and settled-late expire: now == taken + ttl
	AssertUsage(t, l, Day, billing.Usage{HeldAIMicros: 200})
	// The expired hold was released, not merely ignored: its id now names a new hold with a new grant
	// (were it still stored, the retry rule would answer its old 600).
	AssertGranted(t, l, "old", Day, limit, 300, 300)
	AssertGranted(t, l, "fill", Day, limit, 1000, 500)
	AssertUsage(t, l, Day, billing.Usage{HeldAIMicros: 1000})
	// A call that outlived its hold still pays.
	MustSettle(t, l, "settled-late", AI("late", Day, 90))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 90, HeldAIMicros: 1000})
	clock.Advance(TTL - time.Second) // young expires
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 90, HeldAIMicros: 800})
	clock.Advance(time.Second) // and the holds taken at the first expiry
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 90})
	AssertGranted(t, l, "again", Day, limit, 5000, 910)
}

func testUnlimited(t *testing.T, l ReserverLedger) {
	MustRecord(t, l, AI("big", Day, 1_000_000_000_000))
	AssertGranted(t, l, "a", Day, -1, 5000, 5000)
	AssertGranted(t, l, "b", Day, -1, 1<<40, 1<<40)
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 1_000_000_000_000, HeldAIMicros: 5000 + 1<<40})
	MustSettle(t, l, "a", AI("a", Day, 4000))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 1_000_000_004_000, HeldAIMicros: 1 << 40})
	// Holds taken while unlimited count against a limit set later.
	AssertExceeded(t, l, "c", Day, 1<<40, 1)
}

func testHoldAccountsIndependent(t *testing.T, l ReserverLedger) {
	accounts := []billing.Account{
		Day,
		{Issuer: "iss", User: "u", Window: billing.Day, WindowStart: Start.AddDate(0, 0, 1)},
		{Issuer: "iss", User: "u", Window: billing.Hour, WindowStart: Start},
		{Issuer: "iss", User: "u", Window: billing.Lifetime},
		{Issuer: "iss", User: "v", Window: billing.Day, WindowStart: Start},
		{Issuer: "is", User: "su", Window: billing.Day, WindowStart: Start},
	}
	for i, a := range accounts {
		MustRecord(t, l, AI(fmt.Sprintf("used-%d", i), a, int64(i)))
		AssertGranted(t, l, fmt.Sprintf("h-%d", i), a, 100, 100, int64(100-i))
	}
	for i, a := range accounts {
		AssertUsage(t, l, a, billing.Usage{AIMicros: int64(i), HeldAIMicros: int64(100 - i)})
	}
	// The same window start seen from another time zone is the same account.
	elsewhere := Day
	elsewhere.WindowStart = Start.In(time.FixedZone("UTC+5", 5*3600))
	AssertExceeded(t, l, "elsewhere", elsewhere, 100, 1)
	AssertGranted(t, l, "h-0", elsewhere, 100, 1, 100)
	MustSettle(t, l, "h-0", AI("settle-0", elsewhere, 1))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 1})
}

func testReserverInvalid(t *testing.T, l ReserverLedger) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		id   string
		acct billing.Account
		want int64
		ttl  time.Duration
	}{
		{"empty id", "", Day, 10, TTL},
		{"zero want", "h", Day, 0, TTL},
		{"negative want", "h", Day, -10, TTL},
		{"zero ttl", "h", Day, 10, 0},
		{"negative ttl", "h", Day, 10, -TTL},
		{"empty issuer", "h", billing.Account{User: "u", Window: billing.Day, WindowStart: Start}, 10, TTL},
		{"unknown window", "h", billing.Account{Issuer: "iss", User: "u", Window: "fortnight", WindowStart: Start}, 10, TTL},
		{"day without start", "h", billing.Account{Issuer: "iss", User: "u", Window: billing.Day}, 10, TTL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, limit := range []int64{-1, 0, 1000} { // validation comes before the budget
				if g, err := l.Reserve(ctx, tc.id, tc.acct, limit, tc.want, tc.ttl); !errors.Is(err, billing.ErrInvalid) {
					t.Fatalf("Reserve(limit %d) = %d, %v; want ErrInvalid", limit, g, err)
				}
			}
		})
	}
	AssertUsage(t, l, Day, billing.Usage{})

	AssertGranted(t, l, "h", Day, 1000, 100, 100)
	bad := AI("bad", Day, -1)
	if err := l.Settle(ctx, "h", bad); !errors.Is(err, billing.ErrInvalid) {
		t.Errorf("Settle with invalid event: %v, want ErrInvalid", err)
	}
	if err := l.Settle(ctx, "", AI("ok", Day, 1)); !errors.Is(err, billing.ErrInvalid) {
		t.Errorf("Settle with empty id: %v, want ErrInvalid", err)
	}
	if err := l.Release(ctx, ""); !errors.Is(err, billing.ErrInvalid) {
		t.Errorf("Release with empty id: %v, want ErrInvalid", err)
	}
	// A refused settle neither records nor frees, and does not use up the event's key.
	AssertUsage(t, l, Day, billing.Usage{HeldAIMicros: 100})
	MustSettle(t, l, "h", AI("bad", Day, 1))
	AssertUsage(t, l, Day, billing.Usage{AIMicros: 1})
}

// ReserveRace sets Racers goroutines, spread over ledgers (which must share one database and one clock,
// as several processes would), against one account's limit. Each reserves a random want drawn from seed,
// checks in one read that the account's used + held stays within the limit, then settles a random actual
// no greater than its grant or releases. At the end used must equal the sum settled exactly, stay within
// the limit, and nothing may remain held. The wants add up to far more than the limit, so the limit is hit.
func ReserveRace(t *testing.T, seed uint64, ledgers ...ReserverLedger) {
	t.Helper()
	const limit, maxWant = 50_000, 2_000
	ctx := context.Background()
	type plan struct {
		want    int64
		settle  bool
		permill int64 // of the grant to settle, in [500, 1000]
	}
	plans := make([]plan, Racers)
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	for i := range plans {
		plans[i] = plan{want: 1 + r.Int64N(maxWant), settle: r.IntN(3) > 0, permill: 500 + r.Int64N(501)}
	}

	var (
		wg               sync.WaitGroup
		settled, granted atomic.Int64
		cut              atomic.Int64 // reserves granted less than asked, or refused
	)
	for i, p := range plans {
		l := ledgers[i%len(ledgers)]
		wg.Go(func() {
			id := fmt.Sprintf("race-%d-%d", seed, i)
			g, err := l.Reserve(ctx, id, Day, limit, p.want, TTL)
			switch {
			case errors.Is(err, billing.ErrBudgetExceeded):
				cut.Add(1)
			case err != nil:
				t.Errorf("Reserve(%s, want %d): %v", id, p.want, err)
				return
			case g <= 0 || g > p.want:
				t.Errorf("Reserve(%s, want %d) granted %d", id, p.want, g)
			case g < p.want:
				cut.Add(1)
			}
			granted.Add(g)
			u, uerr := l.Usage(ctx, Day)
			if uerr != nil {
				t.Errorf("Usage: %v", uerr)
			} else if u.AIMicros+u.HeldAIMicros > limit {
				t.Errorf("after Reserve(%s): used %d + held %d > limit %d", id, u.AIMicros, u.HeldAIMicros, limit)
			} else if err == nil && u.HeldAIMicros < g {
				t.Errorf("after Reserve(%s) granted %d: only %d held", id, g, u.HeldAIMicros)
			}
			if err != nil {
				return
			}
			if !p.settle {
				if err := l.Release(ctx, id); err != nil {
					t.Errorf("Release(%s): %v", id, err)
				}
				return
			}
			actual := g * p.permill / 1000
			if err := l.Settle(ctx, id, AI(id, Day, actual)); err != nil {
				t.Errorf("Settle(%s, %d): %v", id, actual, err)
				return
			}
			settled.Add(actual)
		})
	}
	wg.Wait()

	u, err := ledgers[0].Usage(ctx, Day)
	if err != nil {
		t.Fatal(err)
	}
	if u.AIMicros != settled.Load() || u.AIMicros > limit || u.HeldAIMicros != 0 {
		t.Errorf("after the race: used %d (settled %d, limit %d), held %d (want 0)",
			u.AIMicros, settled.Load(), limit, u.HeldAIMicros)
	}
	if cut.Load() == 0 {
		t.Errorf("no reserve was cut short: the race never reached the limit (granted %d in all)", granted.Load())
	}
	t.Logf("seed %d: granted %d, settled %d of limit %d, %d of %d reserves cut short",
		seed, granted.Load(), settled.Load(), limit, cut.Load(), Racers)
}

// AssertGranted reserves want of acct's budget under id (ttl TTL) and checks the grant.
func AssertGranted(t testing.TB, r billing.Reserver, id string, acct billing.Account, limit, want, granted int64) {
	t.Helper()
	g, err := r.Reserve(context.Background(), id, acct, limit, want, TTL)
	if err != nil {
		t.Fatalf("Reserve(%s, limit %d, want %d): %v", id, limit, want, err)
	}
	if g != granted {
		t.Fatalf("Reserve(%s, limit %d, want %d) granted %d, want %d", id, limit, want, g, granted)
	}
}

// AssertExceeded checks that reserving want under id is refused with billing.ErrBudgetExceeded, in a message
// that says what remains.
func AssertExceeded(t testing.TB, r billing.Reserver, id string, acct billing.Account, limit, want int64) {
	t.Helper()
	g, err := r.Reserve(context.Background(), id, acct, limit, want, TTL)
	if !errors.Is(err, billing.ErrBudgetExceeded) {
		t.Fatalf("Reserve(%s, limit %d, want %d) = %d, %v; want ErrBudgetExceeded", id, limit, want, g, err)
	}
	if !strings.Contains(err.Error(), "remain") {
		t.Fatalf("Reserve(%s) error %q does not say what remains", id, err)
	}
}

// MustSettle settles hold id with ev or fails the test.
func MustSettle(t testing.TB, r billing.Reserver, id string, ev billing.UsageEvent) {
	t.Helper()
	if err := r.Settle(context.Background(), id, ev); err != nil {
		t.Fatalf("Settle(%s, %s): %v", id, ev.Key, err)
	}
}

// MustRelease releases hold id or fails the test.
func MustRelease(t testing.TB, r billing.Reserver, id string) {
	t.Helper()
	if err := r.Release(context.Background(), id); err != nil {
		t.Fatalf("Release(%s): %v", id, err)
	}
}
