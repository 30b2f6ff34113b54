package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// StateAbsent is Status's state of a user without a sandbox: none was ever placed, or the region that held
// it let its lease lapse (the runner is gone; the next request starts one).
const StateAbsent State = "absent"

// Status is what the scheduler knows of a user's sandbox, read without starting one.
type Status struct {
	State  State     // absent, starting, running or asleep
	Region string    // the region that holds or last held it ("" when absent and never placed)
	Epoch  int64     // the placement's epoch (0: never placed)
	Since  time.Time // when the placement last changed state (zero: never placed)
}

// Status reports (issuer, user)'s sandbox from its placement, read from the store (any region's): it
// starts nothing and claims nothing. A starting or running placement whose lease lapsed by now is
// absent. Errors: the store's, wrapped.
func (s *Scheduler) Status(ctx context.Context, issuer, user string, now time.Time) (Status, error) {
	p, err := s.cfg.Placements.Get(ctx, issuer, user)
	if errors.Is(err, ErrNotFound) {
		return Status{State: StateAbsent}, nil
	}
	if err != nil {
		return Status{}, fmt.Errorf("status of %s/%s: %w", issuer, user, err)
	}
	st := Status{State: p.State, Region: p.Region, Epoch: p.Epoch, Since: p.Updated}
	if p.State != StateAsleep && !p.Lease.IsZero() && !now.Before(p.Lease) {
		st.State = StateAbsent
	}
	return st, nil
}
