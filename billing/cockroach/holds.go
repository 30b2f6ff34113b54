package cockroach

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/cockroachdb"
)

var _ billing.Reserver = (*Ledger)(nil)

// Reserve holds up to want microdollars of acct's AI budget under id (billing.Reserver). It is one
// serializable transaction, so used + held never exceeds limit however many processes reserve at once: it
// deletes the account's expired holds (and an expired hold named id), returns the granted amount of a live
// hold named id, else grants min(want, limit - used - held) and inserts the hold, expiring ttl from the
// ledger's clock. limit is capped by the user's AI quota as stored now (the override, else the issuer's
// default).
//
// An empty id, an invalid account, want <= 0, ttl <= 0, and an id held for another account wrap
// billing.ErrInvalid; a spent budget wraps billing.ErrBudgetExceeded; database failures wrap
// billing.ErrUnavailable.
func (l *Ledger) Reserve(ctx context.Context, id string, acct billing.Account, limit, want int64, ttl time.Duration) (int64, error) {
	if err := billing.ValidateReserve(id, acct, want, ttl); err != nil {
		return 0, err
	}
	var granted int64
	err := l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		var err error
		granted, err = reserveTx(ctx, tx, l.now(), id, acct, limit, want, ttl)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reserve hold %s for %s: %w", id, acct, billing.ClassifyStore(err, nil))
	}
	return granted, nil
}

func reserveTx(ctx context.Context, tx pgx.Tx, now time.Time, id string, acct billing.Account, limit, want int64, ttl time.Duration) (int64, error) {
	now = now.UTC()
	start := windowStart(acct)
	// Sweep first: an expired hold named id must not answer as if it were live, and it may belong to
	// another account whose holds this sweep would not reach.
	if _, err := tx.Exec(ctx, `DELETE FROM holds WHERE expires_at <= $5 AND (id = $6 OR
		(issuer = $1 AND "user" = $2 AND "window" = $3 AND window_start = $4))`,
		acct.Issuer, acct.User, string(acct.Window), start, now, id); err != nil {
		return 0, fmt.Errorf("sweep expired holds: %w", err)
	}

	var (
		held      billing.Account
		window    string
		heldStart time.Time
		grant     int64
	)
	err := tx.QueryRow(ctx, `SELECT issuer, "user", "window", window_start, granted FROM holds WHERE id = $1`, id).
		Scan(&held.Issuer, &held.User, &window, &heldStart, &grant)
	switch {
	case err == nil:
		held.Window, held.WindowStart = billing.Window(window), heldStart
		if err := billing.CheckReserveHold(acct, held); err != nil {
			return 0, err
		}
		return grant, nil // a retried Reserve: the first one's grant stands
	case !errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("read hold: %w", err)
	}

	// The user's quota as it stands now caps the limit the caller was admitted with (billing.Reserver).
	var quota int64
	err = tx.QueryRow(ctx, `SELECT ai_micros FROM quotas WHERE issuer = $1 AND "user" IN ($2, '')
		ORDER BY "user" DESC LIMIT 1`, acct.Issuer, acct.User).Scan(&quota)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("read quota: %w", err)
	}
	limit = billing.CapLimit(limit, quota, err == nil)

	var used, reserved int64
	if limit >= 0 { // an unlimited Reserve needs no usage (billing.Grant)
		if err := tx.QueryRow(ctx, `SELECT
			COALESCE((SELECT ai_micros FROM usage_totals
				WHERE issuer = $1 AND "user" = $2 AND "window" = $3 AND window_start = $4), 0),
			(SELECT COALESCE(sum(granted), 0)::INT8 FROM holds
				WHERE issuer = $1 AND "user" = $2 AND "window" = $3 AND window_start = $4 AND expires_at > $5)`,
			acct.Issuer, acct.User, string(acct.Window), start, now).Scan(&used, &reserved); err != nil {
			return 0, fmt.Errorf("read usage: %w", err)
		}
	}
	if grant, err = billing.Grant(limit, want, used, reserved); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO holds
		(id, issuer, "user", "window", window_start, granted, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		id, acct.Issuer, acct.User, string(acct.Window), start, grant, now.Add(ttl)); err != nil {
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
	err := l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		var (
			held      billing.Account
			window    string
			heldStart time.Time
		)
		err := tx.QueryRow(ctx, `DELETE FROM holds WHERE id = $1 RETURNING issuer, "user", "window", window_start`, id).
			Scan(&held.Issuer, &held.User, &window, &heldStart)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("delete hold: %w", err)
		default:
			held.Window, held.WindowStart = billing.Window(window), heldStart
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
	if err := l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM holds WHERE id = $1`, id)
		return err
	}); err != nil {
		return fmt.Errorf("release hold %s: %w", id, billing.ClassifyStore(err, nil))
	}
	return nil
}
