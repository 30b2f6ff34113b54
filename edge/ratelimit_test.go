package edge

import (
	"fmt"
	"maps"
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

// assertAllowAll checks AllowAll's answer and that a refusal left every bucket as it was.
func assertAllowAll(t *testing.T, l *Limiter, wantOK bool, wantRetry time.Duration, takes ...Take) {
	t.Helper()
	before := maps.Clone(l.buckets)
	ok, retry := l.AllowAll(takes...)
	if ok != wantOK || retry != wantRetry {
		t.Fatalf("AllowAll(%+v) = %v, %v; want %v, %v", takes, ok, retry, wantOK, wantRetry)
	}
	if !ok && !maps.Equal(before, l.buckets) {
		t.Fatalf("refused AllowAll(%+v) changed the buckets: %v, was %v", takes, l.buckets, before)
	}
}

// A refusal by one bucket takes nothing from the others, in either order; allowed, every bucket gives one.
func TestLimiterAllowAllAllOrNone(t *testing.T) {
	c := newFakeClock()
	l := NewLimiter(c.Now, 0)
	user := func() Take { return Take{Key: "user", RatePerMin: 60, Burst: 3} }
	issuer := Take{Key: "issuer", RatePerMin: 1, Burst: 1}
	assertAllowAll(t, l, true, 0, user(), issuer) // user 2 left, issuer 0
	for range 5 {
		assertAllowAll(t, l, false, time.Minute, user(), issuer)
		assertAllowAll(t, l, false, time.Minute, issuer, user())
	}
	// The user's bucket still holds its 2 tokens, though the issuer's refused 10 times.
	assertAllow(t, l, "user", 60, 3, true, 0)
	assertAllow(t, l, "user", 60, 3, true, 0)
	assertAllow(t, l, "user", 60, 3, false, time.Second)

	// The other way round: the user's bucket empty, the issuer's refill is not spent on refusals.
	c.Advance(time.Minute) // issuer full (1), user full (3)
	for range 3 {
		assertAllow(t, l, "user", 60, 3, true, 0)
	}
	assertAllowAll(t, l, false, time.Second, issuer, user())
	assertAllow(t, l, "issuer", 1, 1, true, 0)
}

// retryAfter is the longest wait among the refusing buckets; unlimited buckets never refuse nor count,
// and a zero rate refuses with its minute hint.
func TestLimiterAllowAllRetryAfter(t *testing.T) {
	c := newFakeClock()
	l := NewLimiter(c.Now, 0)
	assertAllowAll(t, l, true, 0, Take{"a", 60, 1}, Take{"b", 6, 1}, Take{"c", 600, 1})
	assertAllowAll(t, l, false, 10*time.Second, Take{"a", 60, 1}, Take{"b", 6, 1}, Take{"c", 600, 1})
	c.Advance(2 * time.Second) // a and c full again, b 8 s from a token
	assertAllowAll(t, l, false, 8*time.Second, Take{"a", 60, 1}, Take{"b", 6, 1})
	assertAllowAll(t, l, true, 0, Take{"a", 60, 1}, Take{"c", 600, 1})
	assertAllowAll(t, l, false, time.Second, Take{"a", 60, 1}, Take{"c", 600, 1})

	// Unlimited (and too fast to track) with limited: the limited one decides.
	c.Advance(time.Minute)
	unlimited, huge := Take{"u", -1, 0}, Take{"h", math.MaxInt64, math.MaxInt64}
	assertAllowAll(t, l, true, 0, unlimited, Take{"a", 60, 1}, huge)
	assertAllowAll(t, l, false, time.Second, unlimited, Take{"a", 60, 1}, huge)
	assertAllowAll(t, l, true, 0, unlimited, huge)
	if _, tracked := l.buckets["u"]; tracked {
		t.Fatal("an unlimited take made a bucket")
	}

	// Zero with anything: refused, a minute at least, and the others keep their tokens.
	assertAllowAll(t, l, false, time.Minute, Take{"z", 0, 5}, unlimited)
	assertAllowAll(t, l, false, time.Minute, Take{"d", 60, 1}, Take{"z", 0, 5})
	assertAllow(t, l, "d", 60, 1, true, 0)

	// Two takes from one key take two tokens: with one in the bucket, the second waits a token's time.
	assertAllowAll(t, l, false, 10*time.Second, Take{"b", 6, 1}, Take{"b", 6, 1})
	assertAllowAll(t, l, true, 0, Take{"b", 6, 2}, Take{"b", 6, 2})
	assertAllowAll(t, l, false, 2*time.Minute, Take{"z", 0, 5}, Take{"slow", 1, 1}, Take{"x", 1, 1}, Take{"slow", 1, 1},
		Take{"slow", 1, 1}) // slow: one token, three asked

	// No takes: nothing to refuse.
	assertAllowAll(t, l, true, 0)
}

// Allow and AllowAll of one take are the same operation.
func TestLimiterAllowIsAllowAllOfOne(t *testing.T) {
	c := newFakeClock()
	a, b := NewLimiter(c.Now, 0), NewLimiter(c.Now, 0)
	for i := range 200 {
		rate, burst := int64(i%7-1)*10, int64(i%3)
		okA, retryA := a.Allow("k", rate, burst)
		okB, retryB := b.AllowAll(Take{"k", rate, burst})
		if okA != okB || retryA != retryB || !maps.Equal(a.buckets, b.buckets) {
			t.Fatalf("step %d: Allow = %v, %v; AllowAll = %v, %v", i, okA, retryA, okB, retryB)
		}
		c.Advance(time.Duration(i%5) * 300 * time.Millisecond)
	}
}

// FuzzLimiterAllowAll runs a script of clock steps and AllowAll calls over a few keys and checks each call
// against Allow on copies of the limiter. AllowAll allows exactly when the takes, one by one, all are
// (each seeing the earlier ones of its call), and then leaves the buckets as they leave them; refused, it
// leaves the buckets unchanged, and its retryAfter is, for takes of distinct keys, the longest wait of
// the takes one by one, and in general (no rate 0, no key asked for more than its burst) the shortest
// wait after which the same call is allowed.
func FuzzLimiterAllowAll(f *testing.F) {
	f.Add([]byte{0x10, 0x00, 0x11, 0x12, 0x13, 0x14, 0x21, 0x22, 0x01, 0x80, 0x33, 0x33, 0x33})
	f.Add([]byte{0x30, 0x01, 0x02, 0x03, 0x04, 0x30, 0x01, 0x02, 0x03, 0x04, 0x05, 0xff, 0x30, 0x01})
	f.Add([]byte{0x27, 0x45, 0x45, 0x11, 0x09, 0x27, 0x45, 0x45, 0x11})
	f.Add([]byte{0x11, 0x54, 0x11, 0x54, 0x11, 0x54, 0x31, 0x54, 0x55, 0x56, 0x57, 0x00, 0x32, 0x11, 0x54})
	rates := []int64{-1, 0, 1, 2, 6, 60, 600, math.MaxInt64}
	bursts := []int64{0, 1, 2, 3, 10, math.MaxInt64}
	f.Fuzz(func(t *testing.T, script []byte) {
		c := newFakeClock()
		l := NewLimiter(c.Now, 0)
		copyAt := func(at time.Time) *Limiter {
			return &Limiter{now: func() time.Time { return at }, maxKeys: l.maxKeys, buckets: maps.Clone(l.buckets), nextSweep: l.nextSweep}
		}
		for len(script) > 0 {
			op := script[0]
			script = script[1:]
			if op&0x0f == 0 { // a clock step of up to 25.5 s
				if len(script) > 0 {
					c.Advance(time.Duration(script[0]) * 100 * time.Millisecond)
					script = script[1:]
				}
				continue
			}
			var takes []Take
			for range int(op>>4)%4 + 1 {
				if len(script) == 0 {
					break
				}
				b := script[0]
				script = script[1:]
				takes = append(takes, Take{Key: fmt.Sprint("k", b%4), RatePerMin: rates[int(b>>2)%len(rates)],
					Burst: bursts[int(b>>5)%len(bursts)]})
			}
			now, before := c.Now(), maps.Clone(l.buckets)
			ref := copyAt(now)
			wantOK, wantRetry := true, time.Duration(0)
			for _, tk := range takes {
				if ok, retry := ref.Allow(tk.Key, tk.RatePerMin, tk.Burst); !ok {
					wantOK, wantRetry = false, max(wantRetry, retry)
				}
			}
			ok, retry := l.AllowAll(takes...)
			switch {
			case ok != wantOK:
				t.Fatalf("AllowAll(%+v) = %v, %v; one by one %v", takes, ok, retry, wantOK)
			case ok && (retry != 0 || !maps.Equal(l.buckets, ref.buckets)):
				t.Fatalf("allowed AllowAll(%+v): retry %v, left %v; one by one %v", takes, retry, l.buckets, ref.buckets)
			case !ok && (retry <= 0 || !maps.Equal(l.buckets, before)):
				t.Fatalf("refused AllowAll(%+v): retry %v, buckets %v, were %v", takes, retry, l.buckets, before)
			}
			if ok {
				continue
			}
			// How the keys are asked: distinct, and whether waiting helps.
			asked := map[string][]Take{}
			for _, tk := range takes {
				asked[tk.Key] = append(asked[tk.Key], tk)
			}
			if len(asked) == len(takes) && retry != wantRetry {
				t.Fatalf("AllowAll(%+v) of distinct keys: retry %v; one by one %v", takes, retry, wantRetry)
			}
			waitHelps := true // false also where one key is asked in different ways: nothing more to check
			for _, ts := range asked {
				for _, tk := range ts {
					waitHelps = waitHelps && tk == ts[0] && tk.RatePerMin != 0 && int64(len(ts)) <= max(tk.Burst, 1)
				}
			}
			if !waitHelps {
				continue
			}
			if ok, _ := copyAt(now.Add(retry)).AllowAll(takes...); !ok {
				t.Fatalf("AllowAll(%+v) refused with retry %v, then refused after it", takes, retry)
			}
			if ok, _ := copyAt(now.Add(retry - 1)).AllowAll(takes...); ok {
				t.Fatalf("AllowAll(%+v) refused with retry %v, but allowed 1 ns before it", takes, retry)
			}
		}
	})
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
