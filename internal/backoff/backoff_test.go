package backoff

import (
	"context"
	"testing"
	"time"
)

func TestSpansDoubleToMaxAndReset(t *testing.T) {
	b := New(100*time.Millisecond, time.Second, WithoutJitter())
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("wait %d: %v, want %v", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != 100*time.Millisecond {
		t.Fatalf("after Reset: %v", got)
	}
	// A huge max does not overflow into negative waits.
	b = New(time.Hour, 1<<62, WithoutJitter())
	for range 100 {
		if d := b.Next(); d <= 0 {
			t.Fatalf("wait %v", d)
		}
	}
	// Degenerate bounds: max below min is min; min of 0 is 1 ns.
	if d := New(time.Second, time.Millisecond, WithoutJitter()).Next(); d != time.Second {
		t.Fatalf("max below min: %v", d)
	}
	if d := New(0, 0, WithoutJitter()).Next(); d != 1 {
		t.Fatalf("zero bounds: %v", d)
	}
}

// With jitter each wait lies in the upper half of its span, and the waits are not all the same (clients
// that failed together spread out).
func TestJitterStaysInTheUpperHalf(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 200 {
		b := New(time.Second, 8*time.Second)
		for _, span := range []time.Duration{1, 2, 4, 8, 8} {
			span *= time.Second
			if d := b.Next(); d < span/2 || d > span {
				t.Fatalf("wait %v outside [%v, %v]", d, span/2, span)
			}
		}
		seen[New(time.Second, time.Second).Next()] = true
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct waits of 200", len(seen))
	}
}

// stepClock hands out channels the test fires, recording the waits asked for.
type stepClock struct {
	waits []time.Duration
	fire  chan time.Time
}

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.waits = append(c.waits, d)
	return c.fire
}

func TestWaitUsesTheClockAndStopsWithTheContext(t *testing.T) {
	c := &stepClock{fire: make(chan time.Time, 1)}
	b := New(time.Second, time.Minute, WithClock(c), WithoutJitter())
	c.fire <- time.Time{}
	if !b.Wait(context.Background()) {
		t.Fatal("a fired wait reports false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go cancel()
	if b.Wait(ctx) { // the clock never fires: only the context ends the wait
		t.Fatal("a cancelled wait reports true")
	}
	if b.Wait(ctx) {
		t.Fatal("a wait on an ended context reports true")
	}
	if len(c.waits) != 2 || c.waits[0] != time.Second || c.waits[1] != 2*time.Second {
		t.Fatalf("waits asked of the clock: %v", c.waits)
	}
}
