// Package ratestest is the contract suite of billing.RateBuckets, run against every adapter (billing/sqlite,
// billing/cockroach).
package ratestest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/ledgertest"
)

// Start is where each subtest's clock begins.
var Start = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// Racers is how many goroutines Race sets against one bucket.
const Racers = 40

// Run runs the contract suite. open returns new, empty buckets reading clock (a fresh one per subtest,
// reading Start) and arranges their closing with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T, clock *ledgertest.Clock) billing.RateBuckets) {
	t.Helper()
	fresh := func(t *testing.T) (billing.RateBuckets, *ledgertest.Clock) {
		c := ledgertest.NewClock(Start)
		return open(t, c), c
	}

	t.Run("BurstThenRefill", func(t *testing.T) {
		r, clock := fresh(t)
		b := billing.RateTake{Key: "connect/user/iss\x00u", PerMinute: 6, Burst: 3} // a token every 10 s
		for range 3 {
			MustTake(t, r, true, b)
		}
		_, retry := Take(t, r, false, b)
		if retry <= 0 || retry > 10*time.Second {
			t.Fatalf("retryAfter = %v, want in (0, 10s]", retry)
		}
		clock.Advance(retry)
		MustTake(t, r, true, b)
		MustTake(t, r, false, b)
		// After a long idle time the bucket is full again, never fuller than its burst.
		clock.Advance(time.Hour)
		for range 3 {
			MustTake(t, r, true, b)
		}
		MustTake(t, r, false, b)
	})

	t.Run("AllOrNothing", func(t *testing.T) {
		r, _ := fresh(t)
		user := billing.RateTake{Key: "prompt/user/iss\x00u", PerMinute: 60, Burst: 2}
		issuer := billing.RateTake{Key: "prompt/issuer/iss", PerMinute: 1, Burst: 1}
		MustTake(t, r, true, issuer) // the issuer's only token
		_, retry := Take(t, r, false, user, issuer)
		if retry < 59*time.Second || retry > time.Minute {
			t.Fatalf("retryAfter = %v, want the issuer's wait (about a minute)", retry)
		}
		// The refusal took nothing from the user's bucket: both its tokens are there.
		MustTake(t, r, true, user)
		MustTake(t, r, true, user)
		MustTake(t, r, false, user)
		// Whatever the order the store takes them in: here the refusing bucket comes last by name too.
		first := billing.RateTake{Key: "a", PerMinute: 60, Burst: 1}
		last := billing.RateTake{Key: "z", PerMinute: 1, Burst: 1}
		MustTake(t, r, true, last)
		MustTake(t, r, false, first, last)
		MustTake(t, r, false, last, first)
		MustTake(t, r, true, first)
	})

	t.Run("KeysIndependent", func(t *testing.T) {
		r, _ := fresh(t)
		a := billing.RateTake{Key: "a", PerMinute: 1, Burst: 1}
		b := billing.RateTake{Key: "b", PerMinute: 1, Burst: 1}
		MustTake(t, r, true, a)
		MustTake(t, r, false, a)
		MustTake(t, r, true, b)
	})

	t.Run("UnlimitedAndZero", func(t *testing.T) {
		r, _ := fresh(t)
		unlimited := billing.RateTake{Key: "u", PerMinute: billing.Unlimited}
		for range 20 {
			MustTake(t, r, true, unlimited)
		}
		none := billing.RateTake{Key: "z", PerMinute: 0, Burst: 5}
		if _, retry := Take(t, r, false, none); retry != time.Minute {
			t.Fatalf("retryAfter of a zero rate = %v, want a minute", retry)
		}
		limited := billing.RateTake{Key: "l", PerMinute: 1, Burst: 1}
		MustTake(t, r, false, unlimited, none, limited)
		MustTake(t, r, true, limited, unlimited) // the refusal above took nothing
	})

	t.Run("RateChangesKeepState", func(t *testing.T) {
		r, clock := fresh(t)
		MustTake(t, r, true, billing.RateTake{Key: "k", PerMinute: 1, Burst: 1})
		// A quota raised to 60 a minute: the bucket carries over (empty for another minute at the old
		// rate, which the new burst of 60 one-second tokens covers but for one second).
		MustTake(t, r, false, billing.RateTake{Key: "k", PerMinute: 60, Burst: 60})
		clock.Advance(time.Second)
		MustTake(t, r, true, billing.RateTake{Key: "k", PerMinute: 60, Burst: 60})
	})

	t.Run("Invalid", func(t *testing.T) {
		r, _ := fresh(t)
		for name, takes := range map[string][]billing.RateTake{
			"empty key": {{Key: "", PerMinute: 1}},
			"too many":  make([]billing.RateTake, billing.MaxRateTakes+1),
			"duplicate": {{Key: "k", PerMinute: 1}, {Key: "k", PerMinute: 2}},
		} {
			if _, _, err := r.TakeAll(context.Background(), takes); !errors.Is(err, billing.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		if ok, _, err := r.TakeAll(context.Background(), nil); err != nil || !ok {
			t.Errorf("no takes = %v, %v; want allowed", ok, err)
		}
	})
}

// Race sets Racers goroutines, spread over buckets (which must share one store, as several edges would),
// taking from one bucket of burst 10 on a stopped clock: exactly 10 takes may succeed.
func Race(t *testing.T, buckets ...billing.RateBuckets) {
	t.Helper()
	const burst = 10
	take := billing.RateTake{Key: "contended", PerMinute: 1, Burst: burst}
	var (
		wg   sync.WaitGroup
		won  atomic.Int64
		mu   sync.Mutex
		errs []error
	)
	for i := range Racers {
		r := buckets[i%len(buckets)]
		wg.Go(func() {
			ok, _, err := r.TakeAll(context.Background(), []billing.RateTake{take})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			if ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("take: %v", err)
	}
	if n := won.Load(); n != burst {
		t.Fatalf("%d of %d racing takes succeeded on a bucket of %d", n, Racers, burst)
	}
}

// Take runs TakeAll(takes), fails the test on an error or when allowed is not want, and returns the result.
func Take(t testing.TB, r billing.RateBuckets, want bool, takes ...billing.RateTake) (bool, time.Duration) {
	t.Helper()
	ok, retry, err := r.TakeAll(context.Background(), takes)
	if err != nil {
		t.Fatalf("TakeAll(%s): %v", describe(takes), err)
	}
	if ok != want {
		t.Fatalf("TakeAll(%s) = %v, want %v", describe(takes), ok, want)
	}
	if ok && retry != 0 || !ok && retry <= 0 {
		t.Fatalf("TakeAll(%s) = %v with retryAfter %v", describe(takes), ok, retry)
	}
	return ok, retry
}

// MustTake is Take without the results.
func MustTake(t testing.TB, r billing.RateBuckets, want bool, takes ...billing.RateTake) {
	t.Helper()
	Take(t, r, want, takes...)
}

func describe(takes []billing.RateTake) string {
	s := ""
	for _, t := range takes {
		s += fmt.Sprintf("[%q %d/min burst %d]", t.Key, t.PerMinute, t.Burst)
	}
	return s
}
