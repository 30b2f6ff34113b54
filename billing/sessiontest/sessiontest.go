// Package sessiontest is the contract suite of billing.Sessions, run against every adapter (billing/sqlite,
// billing/cockroach).
package sessiontest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/ledgertest"
)

// TTL is how long the suite's leases live.
const TTL = time.Minute

// Racers is how many goroutines Race sets against one cap.
const Racers = 50

// Start is where each subtest's clock begins.
var Start = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// Unlimited is a cap that never refuses.
const Unlimited = billing.Unlimited

// Run runs the contract suite of billing.Sessions. open returns new, empty sessions for each subtest whose
// expiry follows clock (a fresh one per subtest, reading Start), and arranges their closing with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T, clock *ledgertest.Clock) billing.Sessions) {
	t.Helper()
	fresh := func(t *testing.T) (billing.Sessions, *ledgertest.Clock) {
		c := ledgertest.NewClock(Start)
		return open(t, c), c
	}

	t.Run("UserCap", func(t *testing.T) {
		s, _ := fresh(t)
		Acquire(t, s, Lease("a", "iss", "u"), 2, Unlimited)
		Acquire(t, s, Lease("b", "iss", "u"), 2, Unlimited)
		err := AcquireErr(s, Lease("c", "iss", "u"), 2, Unlimited)
		AssertLimit(t, err, "user")
		Acquire(t, s, Lease("d", "iss", "v"), 2, Unlimited) // another user of the issuer is not affected
		AssertCount(t, s, "iss", "u", 2, 3)
		AssertCount(t, s, "iss", "v", 1, 3)
	})

	t.Run("IssuerCap", func(t *testing.T) {
		s, _ := fresh(t)
		Acquire(t, s, Lease("a", "iss", "u"), Unlimited, 2)
		Acquire(t, s, Lease("b", "iss", "v"), Unlimited, 2)
		AssertLimit(t, AcquireErr(s, Lease("c", "iss", "w"), Unlimited, 2), "issuer")
		Acquire(t, s, Lease("d", "other", "w"), Unlimited, 2) // another issuer is not affected
		AssertCount(t, s, "iss", "w", 0, 2)
		AssertCount(t, s, "other", "w", 1, 1)
	})

	t.Run("UserCapReportedFirst", func(t *testing.T) {
		s, _ := fresh(t)
		Acquire(t, s, Lease("a", "iss", "u"), 1, 1)
		AssertLimit(t, AcquireErr(s, Lease("b", "iss", "u"), 1, 1), "user")
	})

	t.Run("Unlimited", func(t *testing.T) {
		s, _ := fresh(t)
		for i := range 20 {
			Acquire(t, s, Lease(fmt.Sprint(i), "iss", "u"), Unlimited, Unlimited)
		}
		AssertCount(t, s, "iss", "u", 20, 20)
	})

	t.Run("Zero", func(t *testing.T) {
		s, _ := fresh(t)
		AssertLimit(t, AcquireErr(s, Lease("a", "iss", "u"), 0, Unlimited), "user")
		AssertLimit(t, AcquireErr(s, Lease("a", "iss", "u"), Unlimited, 0), "issuer")
		AssertCount(t, s, "iss", "u", 0, 0)
	})

	t.Run("AcquireAgainRenews", func(t *testing.T) {
		s, clock := fresh(t)
		Acquire(t, s, Lease("a", "iss", "u"), 1, 1)
		clock.Advance(TTL - time.Second)
		// At the cap, yet the lease's own retry succeeds and counts once.
		Acquire(t, s, Lease("a", "iss", "u"), 1, 1)
		AssertCount(t, s, "iss", "u", 1, 1)
		clock.Advance(TTL - time.Second) // past the first expiry, within the renewed one
		AssertCount(t, s, "iss", "u", 1, 1)
		AssertLimit(t, AcquireErr(s, Lease("b", "iss", "u"), 1, 1), "user")
	})

	t.Run("Renew", func(t *testing.T) {
		s, clock := fresh(t)
		Acquire(t, s, Lease("a", "iss", "u"), 1, Unlimited)
		for range 3 {
			clock.Advance(TTL - time.Second)
			if err := s.Renew(context.Background(), "a", TTL); err != nil {
				t.Fatalf("renew: %v", err)
			}
		}
		AssertCount(t, s, "iss", "u", 1, 1)
		if err := s.Renew(context.Background(), "a", TTL); err != nil { // twice in a row is fine
			t.Fatalf("renew again: %v", err)
		}
		clock.Advance(TTL)
		if err := s.Renew(context.Background(), "a", TTL); !errors.Is(err, billing.ErrLeaseGone) {
			t.Fatalf("renew expired lease: %v, want ErrLeaseGone", err)
		}
		if err := s.Renew(context.Background(), "never", TTL); !errors.Is(err, billing.ErrLeaseGone) {
			t.Fatalf("renew unknown lease: %v, want ErrLeaseGone", err)
		}
	})

	t.Run("RenewAll", func(t *testing.T) {
		s, clock := fresh(t)
		ctx := context.Background()
		// One more than a batch, so that the second batch is renewed too.
		ids := make([]string, billing.RenewBatch+1)
		for i := range ids {
			ids[i] = fmt.Sprintf("l%d", i)
			Acquire(t, s, Lease(ids[i], "iss", "u"), Unlimited, Unlimited)
		}
		if err := s.Release(ctx, ids[3]); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			clock.Advance(TTL - time.Second)
			gone, err := s.RenewAll(ctx, append(slices.Clone(ids), "never"), TTL)
			if err != nil {
				t.Fatalf("renew all: %v", err)
			}
			slices.Sort(gone)
			if want := []string{ids[3], "never"}; !slices.Equal(gone, want) {
				t.Fatalf("renew all: gone %q, want %q", gone, want)
			}
		}
		AssertCount(t, s, "iss", "u", int64(len(ids)-1), int64(len(ids)-1))
		last := ids[len(ids)-1]
		clock.Advance(TTL - time.Second)
		if gone, err := s.RenewAll(ctx, []string{last}, TTL); err != nil || len(gone) != 0 {
			t.Fatalf("renew the last: gone %q, %v", gone, err)
		}
		clock.Advance(TTL - time.Second) // only the last was renewed: the others lapse
		AssertCount(t, s, "iss", "u", 1, 1)
		if gone, err := s.RenewAll(ctx, ids[:2], TTL); err != nil || len(gone) != 2 {
			t.Fatalf("renew expired leases: gone %q, %v, want both", gone, err)
		}
		if gone, err := s.RenewAll(ctx, nil, TTL); err != nil || len(gone) != 0 {
			t.Fatalf("renew none: gone %q, %v", gone, err)
		}
	})

	t.Run("ReleaseFrees", func(t *testing.T) {
		s, _ := fresh(t)
		Acquire(t, s, Lease("a", "iss", "u"), 1, Unlimited)
		AssertLimit(t, AcquireErr(s, Lease("b", "iss", "u"), 1, Unlimited), "user")
		for range 2 { // releasing a missing lease is not an error
			if err := s.Release(context.Background(), "a"); err != nil {
				t.Fatalf("release: %v", err)
			}
		}
		AssertCount(t, s, "iss", "u", 0, 0)
		Acquire(t, s, Lease("b", "iss", "u"), 1, Unlimited)
		if err := s.Renew(context.Background(), "a", TTL); !errors.Is(err, billing.ErrLeaseGone) {
			t.Fatalf("renew released lease: %v, want ErrLeaseGone", err)
		}
	})

	t.Run("ExpiryFrees", func(t *testing.T) {
		s, clock := fresh(t)
		Acquire(t, s, Lease("a", "iss", "u"), 1, 1)
		clock.Advance(TTL - time.Nanosecond)
		AssertCount(t, s, "iss", "u", 1, 1)
		AssertLimit(t, AcquireErr(s, Lease("b", "iss", "v"), Unlimited, 1), "issuer")
		clock.Advance(time.Nanosecond)
		AssertCount(t, s, "iss", "u", 0, 0)
		Acquire(t, s, Lease("b", "iss", "v"), Unlimited, 1)
		// The expired lease's ID is free again, and acquiring it faces the caps.
		AssertLimit(t, AcquireErr(s, Lease("a", "iss", "u"), Unlimited, 1), "issuer")
		Acquire(t, s, Lease("a", "iss", "u"), Unlimited, 2)
		AssertCount(t, s, "iss", "u", 1, 2)
	})

	t.Run("ExpiredIDOfAnotherUser", func(t *testing.T) {
		s, clock := fresh(t)
		Acquire(t, s, Lease("a", "iss", "u"), 1, 1)
		clock.Advance(TTL)
		Acquire(t, s, Lease("a", "other", "v"), 1, 1)
		AssertCount(t, s, "iss", "u", 0, 0)
		AssertCount(t, s, "other", "v", 1, 1)
	})

	t.Run("Invalid", func(t *testing.T) {
		s, _ := fresh(t)
		Acquire(t, s, Lease("a", "iss", "u"), 1, 1)
		ctx := context.Background()
		for name, err := range map[string]error{
			"empty id":            s.Acquire(ctx, Lease("", "iss", "u"), 1, 1, TTL),
			"empty issuer":        s.Acquire(ctx, Lease("b", "", "u"), 1, 1, TTL),
			"empty user":          s.Acquire(ctx, Lease("b", "iss", ""), 1, 1, TTL),
			"zero ttl":            s.Acquire(ctx, Lease("b", "iss", "u"), 1, 1, 0),
			"id of another":       s.Acquire(ctx, Lease("a", "iss", "v"), Unlimited, Unlimited, TTL),
			"renew no id":         s.Renew(ctx, "", TTL),
			"renew zero ttl":      s.Renew(ctx, "a", 0),
			"renew all no id":     second(s.RenewAll(ctx, []string{"a", ""}, TTL)),
			"renew all zero ttl":  second(s.RenewAll(ctx, []string{"a"}, 0)),
			"renew none zero ttl": second(s.RenewAll(ctx, nil, 0)),
			"release no id":       s.Release(ctx, ""),
		} {
			if !errors.Is(err, billing.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		if _, _, err := s.Count(ctx, "", "u"); !errors.Is(err, billing.ErrInvalid) {
			t.Errorf("count without issuer: %v, want ErrInvalid", err)
		}
		AssertCount(t, s, "iss", "v", 0, 1)
	})
}

// Race sets Racers goroutines, alternating between a and b (two handles on one store, standing for two
// edges), acquiring distinct leases first for one user with a cap of 2, then for distinct users of one
// issuer with an issuer cap of 3: exactly that many must succeed, every other one must be refused with
// ErrConcurrencyLimit, and the counts must agree.
func Race(t *testing.T, a, b billing.Sessions) {
	t.Helper()
	for _, tc := range []struct {
		name               string
		issuer             string
		user               func(i int) string
		maxUser, maxIssuer int64
		want               int
	}{
		{"user", "iss-u", func(int) string { return "u" }, 2, Unlimited, 2},
		{"issuer", "iss-i", func(i int) string { return fmt.Sprint("u", i) }, Unlimited, 3, 3},
	} {
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			won      int
			failures []error
		)
		for i := range Racers {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Go(func() {
				err := s.Acquire(context.Background(), Lease(fmt.Sprint(tc.name, i), tc.issuer, tc.user(i)), tc.maxUser, tc.maxIssuer, TTL)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case !errors.Is(err, billing.ErrConcurrencyLimit):
					failures = append(failures, err)
				}
			})
		}
		wg.Wait()
		for _, err := range failures {
			t.Errorf("%s race: %v", tc.name, err)
		}
		if won != tc.want {
			t.Errorf("%s race: %d of %d acquires succeeded, want %d", tc.name, won, Racers, tc.want)
		}
		_, issuerLive := counts(t, a, tc.issuer, tc.user(0))
		if issuerLive != int64(tc.want) {
			t.Errorf("%s race: issuer has %d live leases, want %d", tc.name, issuerLive, tc.want)
		}
	}
}

// second is the error of a call that also returns a value.
func second[T any](_ T, err error) error { return err }

// Lease builds a lease.
func Lease(id, issuer, user string) billing.SessionLease {
	return billing.SessionLease{ID: id, Issuer: issuer, User: user}
}

// AcquireErr acquires lease for TTL.
func AcquireErr(s billing.Sessions, lease billing.SessionLease, maxUser, maxIssuer int64) error {
	return s.Acquire(context.Background(), lease, maxUser, maxIssuer, TTL)
}

// Acquire acquires lease for TTL and fails t if it is refused.
func Acquire(t testing.TB, s billing.Sessions, lease billing.SessionLease, maxUser, maxIssuer int64) {
	t.Helper()
	if err := AcquireErr(s, lease, maxUser, maxIssuer); err != nil {
		t.Fatalf("acquire %+v (caps %d/%d): %v", lease, maxUser, maxIssuer, err)
	}
}

// AssertLimit fails t unless err wraps ErrConcurrencyLimit and names which cap ("user" or "issuer"), wrapping
// ErrIssuerConcurrencyLimit exactly for the issuer's.
func AssertLimit(t testing.TB, err error, which string) {
	t.Helper()
	if !errors.Is(err, billing.ErrConcurrencyLimit) {
		t.Fatalf("got %v, want ErrConcurrencyLimit", err)
	}
	if !strings.Contains(err.Error(), which+" ") {
		t.Fatalf("%q does not name the %s cap", err, which)
	}
	if issuer := errors.Is(err, billing.ErrIssuerConcurrencyLimit); issuer != (which == "issuer") {
		t.Fatalf("%q: errors.Is(ErrIssuerConcurrencyLimit) = %v for the %s cap", err, issuer, which)
	}
	if errors.Is(err, billing.ErrUnavailable) {
		t.Fatalf("%q is a refusal, not an outage", err)
	}
}

// AssertCount fails t unless Count answers user and issuer live leases.
func AssertCount(t testing.TB, s billing.Sessions, issuer, user string, wantUser, wantIssuer int64) {
	t.Helper()
	u, i := counts(t, s, issuer, user)
	if u != wantUser || i != wantIssuer {
		t.Fatalf("count %s/%s = %d, %d; want %d, %d", issuer, user, u, i, wantUser, wantIssuer)
	}
}

func counts(t testing.TB, s billing.Sessions, issuer, user string) (int64, int64) {
	t.Helper()
	u, i, err := s.Count(context.Background(), issuer, user)
	if err != nil {
		t.Fatalf("count %s/%s: %v", issuer, user, err)
	}
	return u, i
}
