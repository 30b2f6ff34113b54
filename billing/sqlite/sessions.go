package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// Sessions is billing.Sessions on a Ledger's database and clock. It is a type of its own because
// billing.Reserver already gives Ledger a Release (of holds).
type Sessions struct{ l *Ledger }

var _ billing.Sessions = (*Sessions)(nil)

// Sessions returns the ledger's session leases. They share its database (closed by Ledger.Close) and clock.
func (l *Ledger) Sessions() *Sessions { return &Sessions{l: l} }

// Acquire takes or renews lease (billing.Sessions). It is one immediate transaction, so the caps hold
// across every process on the file: it deletes the issuer's expired leases (and an expired lease named
// lease.ID), renews a live lease of that ID, else counts the user's and the issuer's live leases and
// inserts the lease if both are under their caps.
func (s *Sessions) Acquire(ctx context.Context, lease billing.SessionLease, maxUser, maxIssuer int64, ttl time.Duration) error {
	if err := billing.ValidateLease(lease, ttl); err != nil {
		return err
	}
	err := s.l.inTx(ctx, func(tx *sql.Tx) error {
		// Read the clock holding the write lock: waiting for it may take a while.
		now := s.l.now()
		at, exp := now.UTC().UnixNano(), expiry(now, ttl)
		if _, err := tx.ExecContext(ctx, `DELETE FROM session_leases WHERE expires_at <= ? AND (id = ? OR issuer = ?)`,
			at, lease.ID, lease.Issuer); err != nil {
			return fmt.Errorf("sweep expired leases: %w", err)
		}
		var issuer, user string
		err := tx.QueryRowContext(ctx, `UPDATE session_leases SET expires_at = ? WHERE id = ? RETURNING issuer, "user"`,
			exp, lease.ID).Scan(&issuer, &user)
		switch {
		case err == nil:
			if issuer != lease.Issuer || user != lease.User {
				return fmt.Errorf("id already leased to %s/%s: %w", issuer, user, billing.ErrInvalid)
			}
			return nil // a live lease: renewed
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("renew lease: %w", err)
		}
		userLive, issuerLive, err := countLeases(ctx, tx, at, lease.Issuer, lease.User)
		if err != nil {
			return err
		}
		if err := billing.CheckSessionCaps(lease, userLive, issuerLive, maxUser, maxIssuer); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO session_leases (id, issuer, "user", expires_at) VALUES (?, ?, ?, ?)`,
			lease.ID, lease.Issuer, lease.User, exp); err != nil {
			return fmt.Errorf("insert lease: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("acquire session lease %s for %s/%s: %w", lease.ID, lease.Issuer, lease.User, billing.ClassifyStore(err, nil))
	}
	return nil
}

// Renew extends live lease id to expire ttl from the ledger's clock (billing.Sessions); a lease that is
// gone or expired wraps billing.ErrLeaseGone.
func (s *Sessions) Renew(ctx context.Context, id string, ttl time.Duration) error {
	if err := billing.ValidateRenew(id, ttl); err != nil {
		return err
	}
	now := s.l.now()
	res, err := s.l.db.ExecContext(ctx, `UPDATE session_leases SET expires_at = ? WHERE id = ? AND expires_at > ?`,
		expiry(now, ttl), id, now.UTC().UnixNano())
	if err != nil {
		return fmt.Errorf("renew session lease %s: %w", id, billing.ClassifyStore(err, nil))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("renew session lease %s: %w", id, billing.ClassifyStore(err, nil))
	}
	if n == 0 {
		return fmt.Errorf("renew session lease %s: %w", id, billing.ErrLeaseGone)
	}
	return nil
}

// RenewAll renews every live lease of ids (billing.Sessions), billing.RenewBatch per statement, and returns
// those that are gone.
func (s *Sessions) RenewAll(ctx context.Context, ids []string, ttl time.Duration) ([]string, error) {
	if err := billing.ValidateRenewAll(ids, ttl); err != nil {
		return nil, err
	}
	var gone []string
	for batch := range slices.Chunk(ids, billing.RenewBatch) {
		renewed, err := s.renewBatch(ctx, batch, ttl)
		if err != nil {
			return nil, fmt.Errorf("renew %d session leases: %w", len(batch), billing.ClassifyStore(err, nil))
		}
		gone = append(gone, billing.NotRenewed(batch, renewed)...)
	}
	return gone, nil
}

// renewBatch renews the live leases of ids in one statement and returns those it renewed.
func (s *Sessions) renewBatch(ctx context.Context, ids []string, ttl time.Duration) ([]string, error) {
	now := s.l.now()
	args := make([]any, 0, len(ids)+2)
	args = append(args, expiry(now, ttl), now.UTC().UnixNano())
	for _, id := range ids {
		args = append(args, id)
	}
	q := `UPDATE session_leases SET expires_at = ? WHERE expires_at > ? AND id IN (?` +
		strings.Repeat(",?", len(ids)-1) + `) RETURNING id`
	rows, err := s.l.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	renewed := make([]string, 0, len(ids))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		renewed = append(renewed, id)
	}
	return renewed, rows.Err()
}

// Release deletes lease id (billing.Sessions); a missing lease is not an error. An empty id wraps
// billing.ErrInvalid.
func (s *Sessions) Release(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("release: session lease without id: %w", billing.ErrInvalid)
	}
	if _, err := s.l.db.ExecContext(ctx, `DELETE FROM session_leases WHERE id = ?`, id); err != nil {
		return fmt.Errorf("release session lease %s: %w", id, billing.ClassifyStore(err, nil))
	}
	return nil
}

// Count returns the live leases of user and of its issuer (billing.Sessions), in one statement.
func (s *Sessions) Count(ctx context.Context, issuer, user string) (userLive, issuerLive int64, err error) {
	if issuer == "" || user == "" {
		return 0, 0, fmt.Errorf("count sessions: issuer %q user %q, need both: %w", issuer, user, billing.ErrInvalid)
	}
	userLive, issuerLive, err = countLeases(ctx, s.l.db, s.l.now().UTC().UnixNano(), issuer, user)
	if err != nil {
		return 0, 0, fmt.Errorf("count sessions of %s/%s: %w", issuer, user, billing.ClassifyStore(err, nil))
	}
	return userLive, issuerLive, nil
}

// countLeases counts the live leases of user and of its issuer at at (Unix nanoseconds) in one statement.
func countLeases(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, at int64, issuer, user string) (userLive, issuerLive int64, err error) {
	if err := q.QueryRowContext(ctx, `SELECT
		COALESCE(SUM("user" = ?3), 0), COUNT(*)
		FROM session_leases WHERE issuer = ?1 AND expires_at > ?2`,
		issuer, at, user).Scan(&userLive, &issuerLive); err != nil {
		return 0, 0, fmt.Errorf("count leases: %w", err)
	}
	return userLive, issuerLive, nil
}
