package runner

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/web"
)

// ErrLeaseLapsed is the stop cause when the placement lease the scheduler last told this runner about
// (PUT /v1/lease) ends without a renewal: once it has lapsed another region may claim the user, so the
// runner stops before that, like a fenced one, but with its final snapshot: a newer epoch's snapshot still
// wins over it (the fence refuses it once one is latest; docs/ARCHITECTURE.md#leases).
var ErrLeaseLapsed = fmt.Errorf("%w: the placement lease was not renewed in time", ErrFencedOff)

// LeaseMargin is how long before its lease ends a runner stops itself: room for the clocks of the runner
// and of a claimant in another region to differ, and for the runner's own stop.
const LeaseMargin = 5 * time.Second

// MaxLeaseAhead bounds how far ahead a lease may end: a push beyond it (a scheduler clock gone wrong, a
// confused caller) is refused, so one bad value cannot switch the deadline off.
const MaxLeaseAhead = time.Hour

// leaseWatch stops the runner when its lease ends. Until the first lease arrives there is no deadline (a
// runner whose scheduler does not send leases, e.g. an older one, runs as before).
type leaseWatch struct {
	mu    sync.Mutex
	until time.Time
	timer *time.Timer
}

// Lease records that this runner's placement is held until until (for epoch, which must be the runner's):
// the runner stops itself LeaseMargin before it unless a later lease arrives. An older lease arriving late
// changes nothing.
func (r *Runner) Lease(epoch int64, until time.Time) error {
	if epoch != r.cfg.Epoch {
		return wire.Errorf(wire.Conflict, "a lease for epoch %d; this runner serves epoch %d", epoch, r.cfg.Epoch)
	}
	if until.After(time.Now().Add(MaxLeaseAhead)) {
		return wire.Errorf(wire.InvalidArgument, "a lease ending %s, more than %v ahead", until.UTC().Format(time.RFC3339), MaxLeaseAhead)
	}
	w := &r.lease
	w.mu.Lock()
	defer w.mu.Unlock()
	if !until.After(w.until) {
		return nil
	}
	w.until = until
	d := time.Until(until) - LeaseMargin
	if w.timer == nil {
		w.timer = time.AfterFunc(d, r.leaseEnded)
	} else {
		w.timer.Reset(d)
	}
	return nil
}

// leaseEnded stops the runner if its lease (less the margin) is over; a renewal that raced the timer has
// reset it already.
func (r *Runner) leaseEnded() {
	w := &r.lease
	w.mu.Lock()
	until := w.until
	w.mu.Unlock()
	if left := time.Until(until) - LeaseMargin; left > 0 {
		return
	}
	r.log.Error("placement lease not renewed: stopping before another region may claim this user", "lease_until", until)
	r.stop(ErrLeaseLapsed)
}

// stopLeaseWatch ends the deadline when Run returns.
func (r *Runner) stopLeaseWatch() {
	w := &r.lease
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}

// putLease is PUT /v1/lease: the scheduler renewed the placement's lease.
func (a *api) putLease(w http.ResponseWriter, req *http.Request) {
	b, err := io.ReadAll(http.MaxBytesReader(w, req.Body, wire.MaxLeaseBody))
	if err != nil {
		web.Fail(w, req, wire.Errorf(wire.PayloadTooLarge, "lease body over %d bytes", wire.MaxLeaseBody))
		return
	}
	l, err := wire.DecodeLease(b)
	if err == nil {
		err = a.r.Lease(l.Epoch, l.Until)
	}
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
