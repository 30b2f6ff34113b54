package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/warren-mesh/warren/billing"
)

var _ billing.Reserver = (*Ledger)(nil)

// Reserve holds up to want microdollars of acct's AI budget under id (billing.Reserver). It is one
// immediate transaction, so Reserves, Settles and Records of every process on the file are serialized and
// used + held never exceeds limit: it deletes the account's expired holds (and an expired hold named id),
// returns the granted amount of a live hold named id, else grants min(want, limit - used - held) and
// inserts the hold, limit capped by the user's AI quota as stored now (the override, else the issuer's
// default), expiring ttl from the ledger's clock.
//
// An empty id, an invalid account, want <= 0, ttl <= 0, and an id held for another account wrap
// billing.ErrInvalid; a spent budget wraps billing.ErrBudgetExceeded; database failures wrap
// billing.ErrUnavailable.
func (l *Ledger) Reserve(ctx context.Context, id string, acct billing.Account, limit, want int64, ttl time.Duration) (int64, error) {
	if err := billing.ValidateReserve(id, acct, want, ttl); err != nil {
		return 0, err
	}
	var granted int64
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		granted, err = l.reserveTx(ctx, tx, l.now(), id, acct, limit, want, ttl)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reserve hold %s for %s: %w", id, acct, billing.ClassifyStore(err, nil))
	}
	return granted, nil
}

func (l *Ledger) reserveTx(ctx context.Context, tx *sql.Tx, now time.Time, id string, acct billing.Account, limit, want int64, ttl time.Duration) (int64, error) {
	at, start := now.UTC().UnixNano(), windowStart(acct)
	// Sweep first: an expired hold named id must not answer as if it were live, and it may belong to
	// another account whose holds this sweep would not reach.
	if _, err := tx.StmtContext(ctx, l.st.sweep).ExecContext(ctx,
		acct.Issuer, acct.User, string(acct.Window), start, at, id); err != nil {
		return 0, fmt.Errorf("sweep expired holds: %w", err)
	}

	var (
		held             billing.Account
		heldStart, grant int64
	)
	err := tx.StmtContext(ctx, l.st.readHold).QueryRowContext(ctx, id).
		Scan(&held.Issuer, &held.User, &held.Window, &heldStart, &grant)
	switch {
	case err == nil:
		held.WindowStart = time.Unix(heldStart, 0)
		if err := billing.CheckReserveHold(acct, held); err != nil {
			return 0, err
		}
		return grant, nil // a retried Reserve: the first one's grant stands
	case !errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("read hold: %w", err)
	}

	// The user's quota as it stands now caps the limit the caller was admitted with (billing.Reserver).
	var quota int64
	err = tx.StmtContext(ctx, l.st.quota).QueryRowContext(ctx, acct.Issuer, acct.User).Scan(&quota)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("read quota: %w", err)
	}
	limit = billing.CapLimit(limit, quota, err == nil)

	var used, reserved int64
	if limit >= 0 { // an unlimited Reserve needs no usage (billing.Grant)
		if err := tx.StmtContext(ctx, l.st.reserveUsage).QueryRowContext(ctx, acct.Issuer, acct.User, string(acct.Window), start, at).Scan(&used, &reserved); err != nil {
			return 0, fmt.Errorf("read usage: %w", err)
		}
	}
	if grant, err = billing.Grant(limit, want, used, reserved); err != nil {
		return 0, err
	}
	if _, err := tx.StmtContext(ctx, l.st.insertHold).ExecContext(ctx, id, acct.Issuer, acct.User, string(acct.Window), start, grant, expiry(now, ttl)); err != nil {
		return 0, fmt.Errorf("insert hold: %w", err)
	}
	return grant, nil
}

// Settle records ev (idempotent by ev.Key, exactly as Record) and deletes hold id in one transaction
// (billing.Reserver). A hold that is gone does not stop the recording; a hold of another account than
// ev's is refused, recording nothing, as a caller bug.
//
// An empty id, an invalid event and a hold of another account wrap billing.ErrInvalid; database failures
// wrap billing.ErrUnavailable.
func (l *Ledger) Settle(ctx context.Context, id string, ev billing.UsageEvent) error {
	if id == "" {
		return fmt.Errorf("settle: hold without id: %w", billing.ErrInvalid)
	}
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("settle hold %s: %w", id, err)
	}
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		var (
			held      billing.Account
			heldStart int64
		)
		err := tx.StmtContext(ctx, l.st.settleHold).QueryRowContext(ctx, id).
			Scan(&held.Issuer, &held.User, &held.Window, &heldStart)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("delete hold: %w", err)
		default:
			held.WindowStart = time.Unix(heldStart, 0)
			if err := billing.CheckSettleHold(held, ev.Account); err != nil {
				return err
			}
		}
		return l.recordTx(ctx, tx, ev)
	})
	if err != nil {
		return fmt.Errorf("settle hold %s with usage event %s: %w", id, ev.Key, billing.ClassifyStore(err, nil))
	}
	return nil
}

// Release deletes hold id without recording usage (billing.Reserver); a missing hold is not an error. An
// empty id wraps billing.ErrInvalid; database failures wrap billing.ErrUnavailable.
func (l *Ledger) Release(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("release: hold without id: %w", billing.ErrInvalid)
	}
	if _, err := l.st.release.ExecContext(ctx, id); err != nil {
		return fmt.Errorf("release hold %s: %w", id, billing.ClassifyStore(err, nil))
	}
	return nil
}

// expiry is the stored expires_at of a hold taken at now for ttl: Unix nanoseconds UTC, saturating instead
// of wrapping for absurd ttls. A hold is live while the clock reads before it.
func expiry(now time.Time, ttl time.Duration) int64 {
	at := now.UTC().UnixNano()
	if exp := at + int64(ttl); exp >= at {
		return exp
	}
	return 1<<63 - 1
}
