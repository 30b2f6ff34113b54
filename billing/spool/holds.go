package spool

import (
	"context"
	"fmt"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// Reserve passes through to the ledger (billing.Reserver): a hold cannot be spooled, since nobody could
// promise it. ErrNoReserver when the ledger holds no budget.
func (s *Spool) Reserve(ctx context.Context, id string, acct billing.Account, limit, want int64, ttl time.Duration) (int64, error) {
	if s.reserver == nil {
		return 0, fmt.Errorf("reserve hold %s: %T: %w", id, s.ledger, ErrNoReserver)
	}
	return s.reserver.Reserve(ctx, id, acct, limit, want, ttl)
}

// Settle settles hold id with ev (billing.Reserver). When the ledger is unavailable, or events already
// wait in the spool, the pair is spooled and Settle returns nil once it is on disk; the replay settles the
// hold then, recording ev once and deleting the hold if it has not expired. Until the replay the hold
// keeps counting against the budget (the ledger drops it at its expiry anyway), so the user loses
// headroom for a while, never money.
//
// An empty id or an invalid event wraps billing.ErrInvalid and is not spooled; other errors of the ledger
// are returned as they are; a spool that cannot be written either wraps billing.ErrUnavailable. After
// Close: ErrClosed. ErrNoReserver when the ledger holds no budget.
func (s *Spool) Settle(ctx context.Context, id string, ev billing.UsageEvent) error {
	if s.reserver == nil {
		return fmt.Errorf("settle hold %s: %T: %w", id, s.ledger, ErrNoReserver)
	}
	if id == "" {
		return fmt.Errorf("settle: hold without id: %w", billing.ErrInvalid)
	}
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("settle hold %s: %w", id, err)
	}
	return s.deliverOrSpool(entry{hold: id, ev: ev}, func() error { return s.reserver.Settle(ctx, id, ev) })
}

// Release passes through to the ledger (billing.Reserver): a release that fails needs no replay, since
// the hold expires by itself. ErrNoReserver when the ledger holds no budget.
func (s *Spool) Release(ctx context.Context, id string) error {
	if s.reserver == nil {
		return fmt.Errorf("release hold %s: %T: %w", id, s.ledger, ErrNoReserver)
	}
	return s.reserver.Release(ctx, id)
}
