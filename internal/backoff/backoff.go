// Package backoff paces the retries of a loop that waits for something to come back (a ledger, Nomad, a
// settle): the first wait is Min, each next one twice the last up to Max, each drawn at random from the
// upper half of its span so that many clients that failed together do not retry in step. A wait ends
// early when its context does, and the clock is injectable so a test steps through the waits.
//
// It is the one copy of what the roles' retry loops each spelled out (and drifted on: some jittered, some
// did not, some could not be cancelled).
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Clock gives the channel a wait reads; time.After's by default.
type Clock interface {
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Option changes a Backoff.
type Option func(*Backoff)

// WithClock makes the waits read c.
func WithClock(c Clock) Option { return func(b *Backoff) { b.clock = c } }

// WithoutJitter makes every wait exactly its span (for a single client, where step is no risk).
func WithoutJitter() Option { return func(b *Backoff) { b.jitter = false } }

// Backoff is one loop's waits. It is not safe for concurrent use: each loop has its own.
type Backoff struct {
	min, max time.Duration
	next     time.Duration // the span of the next wait
	jitter   bool
	clock    Clock
}

// New returns waits from lo doubling to hi (hi is raised to lo if lower; lo is at least 1 ns).
func New(lo, hi time.Duration, opts ...Option) *Backoff {
	lo = max(lo, 1)
	b := &Backoff{min: lo, max: max(hi, lo), next: lo, jitter: true, clock: realClock{}}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Next returns the next wait, in [span/2, span] with jitter, and doubles the span of the one after (up
// to max).
func (b *Backoff) Next() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.max)
	if b.next < d { // overflow
		b.next = b.max
	}
	if !b.jitter {
		return d
	}
	return d/2 + rand.N(d-d/2+1)
}

// After returns the channel that receives when the next wait is over, for a loop that waits on other
// channels too.
func (b *Backoff) After() <-chan time.Time { return b.clock.After(b.Next()) }

// Wait waits the next wait and reports true, or false as soon as ctx ends.
func (b *Backoff) Wait(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	select {
	case <-b.After():
		return true
	case <-ctx.Done():
		return false
	}
}

// Reset starts the waits again from min: call it once the thing waited for answered.
func (b *Backoff) Reset() { b.next = b.min }
