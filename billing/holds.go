package billing

import (
	"context"
	"fmt"
	"time"
)

// Reserver holds budget before a model call and settles it after (DESIGN.md §5: reserve, then settle).
// Safe for concurrent use by many processes; every method is one serializable transaction.
type Reserver interface {
	// Reserve holds up to want microdollars of acct's AI budget under hold id and returns what it granted:
	// min(want, limit - used - held) where held counts only unexpired holds. When nothing remains (the
	// result would be <= 0) it returns an error wrapping ErrBudgetExceeded. limit < 0 means unlimited
	// (want is granted). A ledger that also stores quotas (Quotas) caps limit, in the same transaction, by
	// the AI amount of the user's quota as it stands (the user's override, else the issuer's default; as
	// EffectiveLimit, in acct's window): a quota cut stops spending at the next Reserve, even of callers
	// admitted under the old quota. Reserving an id that exists returns its granted amount again
	// (idempotent). The hold expires after ttl: an expired hold no longer counts and is released by the
	// next Reserve of the account. ErrInvalid for an empty id, ttl <= 0, want <= 0, or an id already
	// holding for another account. After a hold is settled, released or expired its id may be reserved
	// again.
	Reserve(ctx context.Context, id string, acct Account, limit, want int64, ttl time.Duration) (granted int64, err error)
	// Settle records ev (idempotent by ev.Key) and deletes hold id in one transaction. Settling a hold that
	// is gone (expired and swept, or settled before) still records ev once. An event for another account
	// than the hold's is ErrInvalid and records nothing.
	Settle(ctx context.Context, id string, ev UsageEvent) error
	// Release deletes hold id without recording usage; a missing hold is not an error.
	Release(ctx context.Context, id string) error
}

// ValidateReserve checks Reserve's arguments the same way for every adapter; failures wrap ErrInvalid.
func ValidateReserve(id string, acct Account, want int64, ttl time.Duration) error {
	if id == "" {
		return fmt.Errorf("reserve: hold without id: %w", ErrInvalid)
	}
	if err := acct.Validate(); err != nil {
		return fmt.Errorf("reserve hold %s: %w", id, err)
	}
	if want <= 0 {
		return fmt.Errorf("reserve hold %s: want %d microdollars, need > 0: %w", id, want, ErrInvalid)
	}
	if ttl <= 0 {
		return fmt.Errorf("reserve hold %s: ttl %v, need > 0: %w", id, ttl, ErrInvalid)
	}
	return nil
}
