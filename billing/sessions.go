package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The sentinels of Sessions live here rather than in errors.go only so that this change touches new files;
// they belong beside the others and may move there.
var (
	// ErrConcurrencyLimit: the user or the issuer already has the maximum number of live sessions
	// (the concurrency_limit error, docs/PROTOCOL.md#errors).
	ErrConcurrencyLimit = errors.New("concurrency limit")
	// ErrIssuerConcurrencyLimit: the cap hit was the issuer's (all its users together), not the user's own.
	// It wraps ErrConcurrencyLimit.
	ErrIssuerConcurrencyLimit = fmt.Errorf("issuer %w", ErrConcurrencyLimit)
	// ErrLeaseGone: a session lease was released or has expired.
	ErrLeaseGone = errors.New("session lease gone")
)

// SessionLease is one running session of User (of Issuer), counted against both their caps while it is live.
// ID names the session and is unique across issuers.
type SessionLease struct {
	ID     string
	Issuer string
	User   string
}

// Sessions counts concurrent sessions with leases that expire unless renewed, so a session whose edge died
// stops counting after its ttl (docs/ARCHITECTURE.md#session-caps: admission refuses a user already at the
// maximum number of concurrent sessions). Safe for concurrent use by any number of processes sharing one
// store; every method is one serializable transaction, and leases expire by the adapter's clock.
//
// Invalid arguments (an empty ID, issuer or user, ttl <= 0) wrap ErrInvalid; a store that cannot be reached
// wraps ErrUnavailable.
type Sessions interface {
	// Acquire deletes expired leases, then takes lease for ttl if the user's live leases number fewer than
	// maxUser and the issuer's fewer than maxIssuer (a negative cap is unlimited, 0 allows none); otherwise
	// it returns an error wrapping ErrConcurrencyLimit whose message names the cap that was hit (the issuer's
	// cap also wraps ErrIssuerConcurrencyLimit). Acquiring a live lease again renews it for ttl and succeeds
	// whatever the caps say (idempotent, so a retried Acquire never counts twice); a live ID of another
	// issuer or user wraps ErrInvalid.
	Acquire(ctx context.Context, lease SessionLease, maxUser, maxIssuer int64, ttl time.Duration) error
	// Renew extends live lease id to expire ttl from now; a released or expired lease wraps ErrLeaseGone
	// (the session must acquire again, facing the caps).
	Renew(ctx context.Context, id string, ttl time.Duration) error
	// RenewAll is Renew for many leases at once (an edge renews all it holds on one timer): it extends
	// every live lease of ids to expire ttl from now, in as few statements as the adapter can (ids are
	// taken RenewBatch at a time, each batch one transaction), and returns the ids that were not renewed
	// because they are released or expired, in no set order. An empty id or ttl <= 0 wraps ErrInvalid.
	RenewAll(ctx context.Context, ids []string, ttl time.Duration) (gone []string, err error)
	// Release deletes lease id; a missing lease is not an error.
	Release(ctx context.Context, id string) error
	// Count returns how many live leases user has, and how many its issuer has (all users together).
	Count(ctx context.Context, issuer, user string) (userLive, issuerLive int64, err error)
}

// ValidateLease checks Acquire's arguments the same way for every adapter; failures wrap ErrInvalid.
func ValidateLease(lease SessionLease, ttl time.Duration) error {
	switch {
	case lease.ID == "":
		return fmt.Errorf("acquire: session lease without id: %w", ErrInvalid)
	case lease.Issuer == "" || lease.User == "":
		return fmt.Errorf("acquire session lease %s: issuer %q user %q, need both: %w", lease.ID, lease.Issuer, lease.User, ErrInvalid)
	case ttl <= 0:
		return fmt.Errorf("acquire session lease %s: ttl %v, need > 0: %w", lease.ID, ttl, ErrInvalid)
	}
	return nil
}

// ValidateRenew checks Renew's arguments the same way for every adapter; failures wrap ErrInvalid.
func ValidateRenew(id string, ttl time.Duration) error {
	switch {
	case id == "":
		return fmt.Errorf("renew: session lease without id: %w", ErrInvalid)
	case ttl <= 0:
		return fmt.Errorf("renew session lease %s: ttl %v, need > 0: %w", id, ttl, ErrInvalid)
	}
	return nil
}

// RenewBatch is how many leases one statement of RenewAll renews at most (SQLite binds up to 32,766
// parameters; a PostgreSQL array has no such bound, but a shorter transaction conflicts less).
const RenewBatch = 1000

// ValidateRenewAll checks RenewAll's arguments the same way for every adapter; failures wrap ErrInvalid.
func ValidateRenewAll(ids []string, ttl time.Duration) error {
	for _, id := range ids {
		if err := ValidateRenew(id, ttl); err != nil {
			return err
		}
	}
	if ttl <= 0 {
		return ValidateRenew("renew-all", ttl)
	}
	return nil
}

// NotRenewed is ids less those renewed: RenewAll's answer from the ids a statement returned.
func NotRenewed(ids, renewed []string) []string {
	got := make(map[string]struct{}, len(renewed))
	for _, id := range renewed {
		got[id] = struct{}{}
	}
	var gone []string
	for _, id := range ids {
		if _, ok := got[id]; !ok {
			gone = append(gone, id)
		}
	}
	return gone
}

// CheckSessionCaps decides Acquire for a new lease given the live counts read in the same transaction: nil,
// or an error wrapping ErrConcurrencyLimit that names the cap (and, for the issuer's, wraps
// ErrIssuerConcurrencyLimit). The user's cap is checked first, as the one the user can do something about.
func CheckSessionCaps(lease SessionLease, userLive, issuerLive, maxUser, maxIssuer int64) error {
	if maxUser >= 0 && userLive >= maxUser {
		return fmt.Errorf("user %s/%s has %d of %d concurrent sessions: %w",
			lease.Issuer, lease.User, userLive, maxUser, ErrConcurrencyLimit)
	}
	if maxIssuer >= 0 && issuerLive >= maxIssuer {
		return fmt.Errorf("issuer %s has %d of %d concurrent sessions: %w",
			lease.Issuer, issuerLive, maxIssuer, ErrIssuerConcurrencyLimit)
	}
	return nil
}
