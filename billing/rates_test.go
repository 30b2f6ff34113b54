package billing_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// Over any run of takes at random times, a bucket lets through at most burst plus one token per refill
// interval elapsed, and never refuses a take that finds a token: the count is exactly what a token bucket
// counting real tokens allows.
func TestGCRAIsATokenBucket(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		take := billing.RateTake{Key: "k", PerMinute: 1 + rng.Int64N(600), Burst: 1 + rng.Int64N(20)}
		interval := time.Minute / time.Duration(take.PerMinute)
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		var full time.Time
		tokens := float64(take.Burst) // the reference bucket
		for i := range 300 {
			step := time.Duration(rng.Int64N(int64(3 * interval)))
			now = now.Add(step)
			tokens = min(float64(take.Burst), tokens+float64(step)/float64(interval))
			next, ok, retry := billing.GCRA(full, now, take)
			want := tokens >= 1-1e-9
			if ok != want {
				t.Fatalf("seed %d take %d: GCRA allowed=%v, reference bucket holds %.6f tokens (%+v)", seed, i, ok, tokens, take)
			}
			if ok {
				tokens--
				full = next
				if retry != 0 {
					t.Fatalf("seed %d: allowed with retryAfter %v", seed, retry)
				}
			} else if retry <= 0 || retry > interval {
				t.Fatalf("seed %d: refused with retryAfter %v, want in (0, %v]", seed, retry, interval)
			}
		}
	}
}

func TestGCRAUnlimitedAndZero(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if next, ok, _ := billing.GCRA(time.Time{}, now, billing.RateTake{PerMinute: billing.Unlimited}); !ok || !next.IsZero() {
		t.Errorf("unlimited: ok=%v next=%v, want allowed with nothing to store", ok, next)
	}
	if _, ok, retry := billing.GCRA(time.Time{}, now, billing.RateTake{PerMinute: 0, Burst: 9}); ok || retry != time.Minute {
		t.Errorf("zero rate: ok=%v retry=%v, want refused with a minute", ok, retry)
	}
	if _, ok, _ := billing.GCRA(time.Time{}, now, billing.RateTake{PerMinute: 1 << 62, Burst: 1}); !ok {
		t.Error("a rate over one a nanosecond refused")
	}
}
