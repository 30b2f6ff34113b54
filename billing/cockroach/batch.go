package cockroach

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// A batcher runs the calls of many goroutines in few transactions: a call is queued, and whichever caller
// leads runs everything queued at that moment as one batch, then hands the lead to the next queued caller.
// At most lanes batches run at once. One lane for the ledger's writes means this process never conflicts
// with itself: the serialization failures left are with other processes, and a hot account's twenty
// concurrent reservations cost one transaction instead of twenty that abort one another.
//
// No goroutine is started: the batches run in the callers' goroutines. A call queued after a batch began
// waits for the next one, so a batch never answers with a state older than the call (a caller reads its
// own writes).
type batcher[T call] struct {
	lanes int
	max   int                                  // calls per batch
	run   func(ctx context.Context, batch []T) // answers every call of batch (finish)

	mu      sync.Mutex
	pending []T
	active  int // leaders: lanes in use

	batches, calls atomic.Int64
}

// call is a queued call: its waiter and its result, which run fills in before finish.
type call interface{ wait() *waiter }

type waiter struct {
	ctx    context.Context
	done   chan struct{} // closed by finish once the result is set
	lead   chan struct{} // a lead handed to this call (buffered)
	leader bool          // guarded by the batcher's mu: this call holds a lane
}

func (w *waiter) wait() *waiter { return w }

func newWaiter(ctx context.Context) waiter {
	return waiter{ctx: ctx, done: make(chan struct{}), lead: make(chan struct{}, 1)}
}

// finish publishes the result run has set.
func (w *waiter) finish() { close(w.done) }

// do queues c and returns once it is answered (nil) or its context is done (the context's error; the call
// may still run in a batch that took it).
func (b *batcher[T]) do(c T) error {
	w := c.wait()
	b.mu.Lock()
	b.pending = append(b.pending, c)
	if b.active < b.lanes {
		b.active++
		w.leader = true
		w.lead <- struct{}{}
	}
	b.mu.Unlock()
	for {
		select {
		case <-w.lead:
			b.lead(w)
		case <-w.done:
			b.abdicate(w)
			return nil
		case <-w.ctx.Done():
			b.mu.Lock()
			if i := slices.IndexFunc(b.pending, func(p T) bool { return p.wait() == w }); i >= 0 {
				b.pending = slices.Delete(b.pending, i, i+1)
			}
			b.mu.Unlock()
			b.abdicate(w)
			return w.ctx.Err()
		}
	}
}

// lead runs the calls queued now (w's own among them, unless another lane took it) as one batch, then
// hands w's lane on.
func (b *batcher[T]) lead(w *waiter) {
	b.mu.Lock()
	n := min(len(b.pending), b.max)
	batch := slices.Clone(b.pending[:n])
	b.pending = slices.Delete(b.pending, 0, n)
	b.mu.Unlock()
	if n > 0 {
		b.batches.Add(1)
		b.calls.Add(int64(n))
		ctx, cancel := batchContext(batch)
		b.run(ctx, batch)
		cancel()
	}
	b.mu.Lock()
	w.leader = false
	b.handOffLocked()
	b.mu.Unlock()
}

// abdicate hands on the lane that w holds without having used it (w was answered or gave up first).
func (b *batcher[T]) abdicate(w *waiter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !w.leader {
		return
	}
	w.leader = false
	select {
	case <-w.lead:
	default:
	}
	b.handOffLocked()
}

// handOffLocked gives a freed lane to the first queued call, or frees it.
func (b *batcher[T]) handOffLocked() {
	for _, p := range b.pending {
		if pw := p.wait(); !pw.leader {
			pw.leader = true
			pw.lead <- struct{}{}
			return
		}
	}
	b.active--
}

// batchContext is the context of a batch: its callers' values, done once every caller's context is.
func batchContext[T call](batch []T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].wait().ctx))
	left := atomic.Int64{}
	left.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, c := range batch {
		stops[i] = context.AfterFunc(c.wait().ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
