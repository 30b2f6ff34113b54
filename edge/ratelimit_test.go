package edge

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock moves only when told to. Safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func assertAllow(t *testing.T, l *Limiter, key string, rate, burst int64, wantOK bool, wantRetry time.Duration) {
	t.Helper()
	ok, retry := l.Allow(key, rate, burst)
	if ok != wantOK || retry != wantRetry {
		t.Fatalf("Allow(%q, %d, %d) = %v, %v; want %v, %v", key, rate, burst, ok, retry, wantOK, wantRetry)
	}
}

func TestLimiterBurstThenRate(t *testing.T) {
	c := newFakeClock()
	l := NewLimiter(c.Now, 0)
	for range 3 {
		assertAllow(t, l, "k", 60, 3, true, 0)
	}
	assertAllow(t, l, "k", 60, 3, false, time.Second)
	c.Advance(400 * time.Millisecond)
	assertAllow(t, l, "k", 60, 3, false, 600*time.Millisecond) // a refusal takes nothing
	c.Advance(600 * time.Millisecond)
	assertAllow(t, l, "k", 60, 3, true, 0)
	assertAllow(t, l, "k", 60, 3, false, time.Second)

	// Steady state: one a second, however often asked.
	var allowed int
	for range 100 * 10 {
		c.Advance(100 * time.Millisecond)
		if ok, _ := l.Allow("k", 60, 3); ok {
			allowed++
		}
	}
	if allowed != 100 {
		t.Fatalf("%d allowed in 100 s at 60/min, want 100", allowed)
	}

	// Idle long enough, the bucket is full again, and no fuller than burst.
	c.Advance(time.Hour)
	for range 3 {
		assertAllow(t, l, "k", 60, 3, true, 0)
	}
	assertAllow(t, l, "k", 60, 3, false, time.Second)
}

func TestLimiterKeysIndependent(t *testing.T) {
	l := NewLimiter(newFakeClock().Now, 0)
	assertAllow(t, l, "a", 1, 1, true, 0)
	assertAllow(t, l, "a", 1, 1, false, time.Minute)
	assertAllow(t, l, "b", 1, 1, true, 0)
}

func TestLimiterEdgeParameters(t *testing.T) {
	c := newFakeClock()
	l := NewLimiter(c.Now, 0)
	for range 1000 {
		assertAllow(t, l, "unlimited", -1, 0, true, 0)
		assertAllow(t, l, "huge", math.MaxInt64, math.MaxInt64, true, 0)
		assertAllow(t, l, "huge-burst", 1, math.MaxInt64, true, 0)
	}
	assertAllow(t, l, "zero", 0, 10, false, time.Minute)
	c.Advance(24 * time.Hour)
	assertAllow(t, l, "zero", 0, 10, false, time.Minute)

	// burst < 1 counts as 1.
	assertAllow(t, l, "no-burst", 2, 0, true, 0)
	assertAllow(t, l, "no-burst", 2, 0, false, 30*time.Second)

	// A lowered rate applies to the bucket's state from the next call.
	assertAllow(t, l, "changed", 60, 2, true, 0)
	assertAllow(t, l, "changed", 60, 2, true, 0)
	assertAllow(t, l, "changed", 6, 1, false, 2*time.Second) // 2 s of debt, then 10 s for its own token, 10 s allowed
}

func TestLimiterBoundedMemory(t *testing.T) {
	c := newFakeClock()
	l := NewLimiter(c.Now, 16)
	for i := range 1000 {
		assertAllow(t, l, fmt.Sprint("k", i), 1, 5, true, 0)
		if n := len(l.buckets); n > 16 {
			t.Fatalf("after %d keys the limiter tracks %d, bound 16", i+1, n)
		}
	}
	// The most recently limited keys are kept: the last one is still at its burst.
	for range 4 {
		assertAllow(t, l, "k999", 1, 5, true, 0)
	}
	assertAllow(t, l, "k999", 1, 5, false, time.Minute)

	// Refilled buckets are dropped by the next sweep, a minute of the clock on.
	c.Advance(10 * time.Minute)
	assertAllow(t, l, "fresh", 1, 5, true, 0)
	if n := len(l.buckets); n != 1 {
		t.Fatalf("after every bucket refilled the limiter tracks %d keys, want 1", n)
	}
}

// However many goroutines ask at once, a bucket hands out exactly its tokens.
func TestLimiterConcurrent(t *testing.T) {
	c := newFakeClock()
	l := NewLimiter(c.Now, 0)
	var (
		wg      sync.WaitGroup
		allowed atomic.Int64
	)
	for i := range 200 {
		wg.Go(func() {
			if ok, _ := l.Allow("shared", 10, 7); ok {
				allowed.Add(1)
			}
			l.Allow(fmt.Sprint("own", i), 10, 7)
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 7 {
		t.Fatalf("%d of 200 allowed with burst 7, want 7", n)
	}
}

func BenchmarkLimiterAllow(b *testing.B) {
	l := NewLimiter(nil, 0)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Allow(fmt.Sprint("k", i%1000), 600, 10)
			i++
		}
	})
}
