package edge

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// leaseTTL bounds how long a crashed edge's connections keep counting against the caps.
const leaseTTL = time.Minute

// leaseRenewEvery is how often the edge renews the leases it holds: three renewals per ttl, so one that
// fails (a store briefly away) leaves time for the next.
const leaseRenewEvery = leaseTTL / 3

// leaseKeeper renews the session leases of the edge's agent channels together: every interval, all that are
// held in one Sessions.RenewAll, on a timer armed only while some are held (no goroutine, no timer, no
// transaction per channel). Safe for concurrent use.
type leaseKeeper struct {
	sessions billing.Sessions
	every    time.Duration

	mu    sync.Mutex              // guards held and timer
	held  map[string]*slog.Logger // lease id → the logger of its channel
	timer *time.Timer             // armed (or renewing) while held is not empty
}

func newLeaseKeeper(s billing.Sessions, every time.Duration) *leaseKeeper {
	return &leaseKeeper{sessions: s, every: every, held: make(map[string]*slog.Logger)}
}

// add renews lease id, whose channel logs to log, until remove.
func (k *leaseKeeper) add(id string, log *slog.Logger) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held[id] = log
	if k.timer == nil {
		k.timer = time.AfterFunc(k.every, k.renew)
	}
}

// remove stops renewing lease id; the timer stops itself once none is held.
func (k *leaseKeeper) remove(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.held, id)
}

// renew renews every lease held, logging those the store no longer has (released or expired: their
// channels no longer count against the caps), and arms the timer again while any is held.
func (k *leaseKeeper) renew() {
	k.mu.Lock()
	ids := make([]string, 0, len(k.held))
	for id := range k.held {
		ids = append(ids, id)
	}
	k.mu.Unlock()
	if len(ids) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), k.every)
		gone, err := k.sessions.RenewAll(ctx, ids, leaseTTL)
		cancel()
		k.report(ids, gone, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.held) == 0 {
		k.timer = nil
		return
	}
	k.timer.Reset(k.every)
}

// report logs a failed renewal on each channel it concerns that is still held.
func (k *leaseKeeper) report(ids, gone []string, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		gone = ids
	}
	for _, id := range gone {
		if log, ok := k.held[id]; ok {
			if err == nil {
				err = billing.ErrLeaseGone
			}
			log.Warn("renew session lease", "err", err, "renewing", len(ids))
		}
	}
}

// heldIDs are the lease ids being renewed, sorted (for tests).
func (k *leaseKeeper) heldIDs() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	ids := make([]string, 0, len(k.held))
	for id := range k.held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
