package billing

import (
	"context"
	"fmt"
	"time"
)

// Reserver holds budget before a model call and settles it after (docs/ARCHITECTURE.md#reserve-settle).
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

// The rules of Reserve and Settle, the same for every adapter: the adapter reads the account's state in its
// transaction and asks these, so that it does I/O only. They are separate steps because the adapter reads
// only what the next step needs: a retried Reserve stops at its hold, and an unlimited one reads no usage.

// Same reports whether a and b name one account as the ledgers store it: the same issuer, user and window,
// and for a bounded window the same start to the second (starts are stored truncated to the second; the
// lifetime window has none).
func (a Account) Same(b Account) bool {
	if a.Issuer != b.Issuer || a.User != b.User || a.Window != b.Window {
		return false
	}
	return a.Window == Lifetime || a.WindowStart.Unix() == b.WindowStart.Unix()
}

// CheckReserveHold checks the live hold that Reserve found under the requested id, of account held as
// stored: nil when it holds acct's budget (a retried Reserve, answered with that hold's grant), an error
// wrapping ErrInvalid naming held otherwise.
func CheckReserveHold(acct, held Account) error {
	if !held.Same(acct) {
		return fmt.Errorf("id already holds budget of %s/%s %s: %w", held.Issuer, held.User, held.Window, ErrInvalid)
	}
	return nil
}

// CheckSettleHold checks the hold that Settle deleted, of account held as stored, against the event's
// account: nil when they are the same, an error wrapping ErrInvalid otherwise (the caller's bug; nothing is
// recorded).
func CheckSettleHold(held, event Account) error {
	if !held.Same(event) {
		return fmt.Errorf("hold is of %s/%s %s, event of %s: %w", held.Issuer, held.User, held.Window, event, ErrInvalid)
	}
	return nil
}

// CapLimit is the limit a Reserve grants against: the caller's limit capped by the AI amount of the user's
// quota as stored now (quota, when found is true; the override, else the issuer's default). A quota >= 0
// below the limit, or with the limit unlimited (< 0), replaces it; an unlimited quota (< 0) or none leaves
// it: a quota never lifts the caller's own limit.
func CapLimit(limit, quota int64, found bool) int64 {
	if found && quota >= 0 && (limit < 0 || quota < limit) {
		return quota
	}
	return limit
}

// Grant is what a Reserve of want grants against limit (after CapLimit) when the account's window has used
// microdollars spent and held reserved by its live holds: want when limit < 0 (unlimited; used and held are
// not looked at, and the adapter need not read them), else min(want, limit - used - held), and an error
// wrapping ErrBudgetExceeded when nothing remains, so that used + held never exceeds limit.
func Grant(limit, want, used, held int64) (int64, error) {
	if limit < 0 {
		return want, nil
	}
	remaining := limit - used - held
	if remaining <= 0 {
		return 0, fmt.Errorf("0 of %d microdollars remain (used %d, held %d): %w", limit, used, held, ErrBudgetExceeded)
	}
	return min(want, remaining), nil
}
