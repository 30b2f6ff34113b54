package edge

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/httpx"
)

// DefaultLimiterKeys is how many keys a Limiter tracks at most unless told otherwise.
const DefaultLimiterKeys = 100_000

// sweepEvery is how often, by the limiter's clock, AllowAll drops the buckets that have refilled.
const sweepEvery = time.Minute

// Limiter is a set of token buckets, one per key (an issuer and user, say), that admission asks before
// letting a request in (docs/ARCHITECTURE.md#rate-buckets; refusals are rate_limited,
// docs/PROTOCOL.md#errors). Safe for concurrent use.
//
// Each bucket is kept as the time at which it will be full again (the generic cell rate algorithm, an exact
// token bucket in one value): a request is let in if the bucket would be full again within burst refill
// intervals after taking its token. A full bucket is the same as no bucket, so buckets that have refilled
// are dropped (every minute of the clock, and whenever the table is full) and memory follows the keys
// active in the last burst/rate minutes. Should more keys than the bound be active at once, the buckets
// nearest to full are dropped first, giving those keys back at most the tokens they had already
// regained; the limiter never refuses a key for lack of room.
type Limiter struct {
	now     func() time.Time
	maxKeys int

	mu        sync.Mutex
	buckets   map[string]time.Time // key -> when its bucket is full again; absent: full
	nextSweep time.Time
}

// NewLimiter returns a limiter reading now (nil: time.Now) that tracks at most maxKeys keys (<= 0:
// DefaultLimiterKeys).
func NewLimiter(now func() time.Time, maxKeys int) *Limiter {
	if now == nil {
		now = time.Now
	}
	if maxKeys <= 0 {
		maxKeys = DefaultLimiterKeys
	}
	return &Limiter{now: now, maxKeys: maxKeys, buckets: make(map[string]time.Time)}
}

// Allow takes a token from key's bucket, which holds burst tokens and refills at ratePerMin tokens a minute,
// and reports whether there was one. When there was not, retryAfter is how long until there will be (for
// the Retry-After header; round it up). A refused request takes nothing.
//
// ratePerMin < 0 is unlimited; 0 lets nothing in (retryAfter is then a minute, a hint, as no wait helps).
// burst < 1 counts as 1. Rate and burst may differ from call to call for one key (a quota changed): the
// bucket's state carries over under the new parameters.
func (l *Limiter) Allow(key string, ratePerMin, burst int64) (ok bool, retryAfter time.Duration) {
	return l.AllowAll(Take{Key: key, RatePerMin: ratePerMin, Burst: burst})
}

// Take names one token to take for AllowAll: from Key's bucket, which holds Burst tokens and refills at
// RatePerMin tokens a minute, read as Allow reads its parameters.
type Take struct {
	Key        string
	RatePerMin int64
	Burst      int64
}

// AllowAll takes a token from each of the buckets of takes, all or none: one request that must pass
// several limits (a user's and its issuer's) is let in only if every bucket has a token, and a bucket that
// refuses costs the others nothing. When refused, retryAfter is the longest wait among the refusing
// buckets: after it the same call is let in, unless a rate is 0 or a key is asked for more than its burst.
// Several takes from one key ask for that many tokens. No takes: allowed.
func (l *Limiter) AllowAll(takes ...Take) (ok bool, retryAfter time.Duration) {
	type pending struct {
		key  string
		next time.Time // when the key's bucket is full again once the token is taken
	}
	var buf [4]pending // callers take from one or two buckets: no allocation
	commits := buf[:0]
	ok = true

	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for _, t := range takes {
		if t.RatePerMin == 0 {
			ok, retryAfter = false, max(retryAfter, time.Minute)
			continue
		}
		interval, tolerance, limited := billing.GCRAParams(billing.RateTake{PerMinute: t.RatePerMin, Burst: t.Burst})
		if !limited {
			continue // unlimited, or more than one a nanosecond: no limit worth tracking
		}
		full, tracked := l.buckets[t.Key]
		for _, c := range commits { // a bucket this call already takes from: as it will be
			if c.key == t.Key {
				full, tracked = c.next, true
			}
		}
		if !tracked || full.Before(now) {
			full = now
		}
		next := full.Add(interval)
		if ahead := next.Sub(now); ahead > tolerance {
			ok, retryAfter = false, max(retryAfter, ahead-tolerance)
		}
		// Refused or not, a later take from the same key waits behind this one; nothing is committed
		// unless all are allowed.
		commits = append(commits, pending{t.Key, next})
	}
	if !ok {
		return false, retryAfter
	}
	for _, c := range commits {
		if _, tracked := l.buckets[c.key]; !tracked && len(l.buckets) >= l.maxKeys || !now.Before(l.nextSweep) {
			l.sweep(now)
		}
		l.buckets[c.key] = c.next
	}
	return true, 0
}

// sweep drops the buckets that are full again at now and, if the table is still nearly full, the ones
// nearest to full until an eighth of it is free, so that sweeps on overflow are rare. Called with mu held.
func (l *Limiter) sweep(now time.Time) {
	l.nextSweep = now.Add(sweepEvery)
	for k, full := range l.buckets {
		if !full.After(now) {
			delete(l.buckets, k)
		}
	}
	keep := l.maxKeys - max(l.maxKeys/8, 1)
	if len(l.buckets) <= keep {
		return
	}
	type entry struct {
		key  string
		full time.Time
	}
	entries := make([]entry, 0, len(l.buckets))
	for k, full := range l.buckets {
		entries = append(entries, entry{k, full})
	}
	slices.SortFunc(entries, func(a, b entry) int { return a.full.Compare(b.full) })
	for _, e := range entries[:len(entries)-keep] {
		delete(l.buckets, e.key)
	}
}

// Shared rate buckets are asked within sharedTakeTimeout; after a failure this edge's own buckets decide
// alone for sharedBackoff before the store is tried again, so a store that is down or slow costs a prompt
// at most one short wait per backoff period.
const (
	sharedTakeTimeout = 500 * time.Millisecond
	sharedBackoff     = 5 * time.Second
)

// sharedRates is the state of the edge's use of the shared buckets.
type sharedRates struct {
	mu        sync.Mutex
	downUntil time.Time // while in the future, the local Limiter decides
	down      bool      // the last attempt failed (for logging state changes only)
}

// takeRates takes from every bucket of takes, all or none: in the shared RateBuckets when configured and
// answering (within sharedTakeTimeout), else in this edge's Limiter. A take the client gave up on (ctx
// ended) is refused quietly.
func (e *Edge) takeRates(ctx context.Context, takes ...Take) (ok bool, retryAfter time.Duration) {
	if e.cfg.RateBuckets == nil {
		return e.limiter.AllowAll(takes...)
	}
	now := time.Now()
	e.shared.mu.Lock()
	skip := now.Before(e.shared.downUntil)
	e.shared.mu.Unlock()
	if !skip {
		shared := make([]billing.RateTake, len(takes))
		for i, t := range takes {
			shared[i] = billing.RateTake{Key: t.Key, PerMinute: t.RatePerMin, Burst: t.Burst}
		}
		tctx, cancel := context.WithTimeout(ctx, sharedTakeTimeout)
		ok, retry, err := e.cfg.RateBuckets.TakeAll(tctx, shared)
		cancel()
		if ctx.Err() != nil {
			return false, 0
		}
		e.shared.mu.Lock()
		wasDown := e.shared.down
		e.shared.down = err != nil
		if err != nil {
			e.shared.downUntil = time.Now().Add(sharedBackoff)
		}
		e.shared.mu.Unlock()
		switch {
		case err == nil && wasDown:
			e.log.Info("shared rate buckets answer again", "request_id", httpx.RequestID(ctx))
		case err != nil && !wasDown:
			e.log.Warn("shared rate buckets failed; this edge's own buckets decide until they answer", "request_id", httpx.RequestID(ctx), "err", err)
		}
		if err == nil {
			return ok, retry
		}
	}
	e.m.rateFallbacks.Inc()
	return e.limiter.AllowAll(takes...)
}
