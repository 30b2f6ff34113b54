package billing

import (
	"context"
	"fmt"
	"math"
	"time"
)

// RateTake asks for one token of the bucket Key, which holds Burst tokens (< 1 counts as 1) and refills
// at PerMinute tokens a minute. PerMinute < 0 is unlimited; 0 lets nothing through.
type RateTake struct {
	Key       string
	PerMinute int64
	Burst     int64
}

// RateBuckets are token buckets shared by every process using one store, so that a user's or an issuer's
// connect and prompt rates hold across all the edges in front of them (docs/ARCHITECTURE.md#rate-buckets), as
// the session caps do. Safe for concurrent use by any number of processes; TakeAll is one serializable
// transaction and reads the adapter's clock.
type RateBuckets interface {
	// TakeAll takes one token from every bucket of takes if each has one, and none otherwise: a refusal
	// by one bucket costs the others nothing. Refused, retryAfter is how long until all would have one
	// (a minute, as a hint, when a rate is 0). An empty or repeated Key or more than MaxRateTakes takes
	// wraps ErrInvalid; an unreachable store wraps ErrUnavailable.
	TakeAll(ctx context.Context, takes []RateTake) (ok bool, retryAfter time.Duration, err error)
}

// MaxRateTakes bounds how many buckets one TakeAll touches.
const MaxRateTakes = 8

// ValidateTakes checks takes for TakeAll.
func ValidateTakes(takes []RateTake) error {
	if len(takes) > MaxRateTakes {
		return fmt.Errorf("%d rate buckets in one take, at most %d: %w", len(takes), MaxRateTakes, ErrInvalid)
	}
	for i, t := range takes {
		if t.Key == "" {
			return fmt.Errorf("rate bucket without a key: %w", ErrInvalid)
		}
		for _, u := range takes[:i] {
			if u.Key == t.Key {
				return fmt.Errorf("rate bucket %q named twice in one take: %w", t.Key, ErrInvalid)
			}
		}
	}
	return nil
}

// Limited is takes without the unlimited ones (PerMinute < 0), which a store need not read or write.
func Limited(takes []RateTake) []RateTake {
	out := takes[:0:0]
	for _, t := range takes {
		if t.PerMinute >= 0 {
			out = append(out, t)
		}
	}
	return out
}

// GCRAParams are t's refill interval (the time one token takes to come back) and tolerance (how far
// ahead of now its bucket may be full again: burst intervals, math.MaxInt64 when that overflows). limited
// is false for an unlimited rate (PerMinute < 0) or one over a token a nanosecond: nothing to track. A
// rate of 0 must be handled by the caller (nothing ever passes).
func GCRAParams(t RateTake) (interval, tolerance time.Duration, limited bool) {
	if t.PerMinute <= 0 {
		return 0, 0, t.PerMinute == 0
	}
	interval = time.Minute / time.Duration(t.PerMinute)
	if interval <= 0 {
		return 0, 0, false
	}
	burst := max(t.Burst, 1)
	tolerance = time.Duration(math.MaxInt64)
	if burst <= math.MaxInt64/int64(interval) {
		tolerance = interval * time.Duration(burst)
	}
	return interval, tolerance, true
}

// GCRA decides one take from a bucket kept as the time full at which it is full again (the generic cell
// rate algorithm: an exact token bucket in one value; a zero full, or one in the past, is a full bucket).
// Allowed, next is the bucket's new value; refused, retryAfter is how long until it has a token. An
// unlimited rate (or one over a token a nanosecond) is always allowed with a zero next: nothing to store.
func GCRA(full, now time.Time, t RateTake) (next time.Time, ok bool, retryAfter time.Duration) {
	if t.PerMinute == 0 {
		return full, false, time.Minute
	}
	interval, tolerance, limited := GCRAParams(t)
	if !limited {
		return time.Time{}, true, 0
	}
	if full.Before(now) {
		full = now
	}
	next = full.Add(interval)
	if ahead := next.Sub(now); ahead > tolerance {
		return full, false, ahead - tolerance
	}
	return next, true, 0
}
