package cockroach

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/cockroachdb"
)

// sessionMigrations are the schema "sessions", append-only (see cockroachdb.Migrate), migrated by New.
// The index serves the per-issuer count and sweep; its prefix, the per-user count.
var sessionMigrations = []string{
	`CREATE TABLE session_leases (
		id         TEXT        PRIMARY KEY,
		issuer     TEXT        NOT NULL,
		"user"     TEXT        NOT NULL,
		expires_at TIMESTAMPTZ NOT NULL
	);
	CREATE INDEX session_leases_by_user ON session_leases (issuer, "user", expires_at)`,
}

// Sessions is billing.Sessions on a Ledger's pool and clock. It is a type of its own because
// billing.Reserver already gives Ledger a Release (of holds).
type Sessions struct{ l *Ledger }

var _ billing.Sessions = (*Sessions)(nil)

// Sessions returns the ledger's session leases (their table was migrated by New; no I/O). They share the
// ledger's pool and clock.
func (l *Ledger) Sessions() *Sessions { return &Sessions{l: l} }

// Acquire takes or renews lease (billing.Sessions). It is one serializable transaction, so the caps hold
// however many edges acquire at once: it deletes the issuer's expired leases (and an expired lease named
// lease.ID), renews a live lease of that ID, else counts the user's and the issuer's live leases and
// inserts the lease if both are under their caps. Running it again after an ambiguous commit finds the
// lease live and renews it, so it is safe to retry.
func (s *Sessions) Acquire(ctx context.Context, lease billing.SessionLease, maxUser, maxIssuer int64, ttl time.Duration) error {
	if err := billing.ValidateLease(lease, ttl); err != nil {
		return err
	}
	err := s.l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		now := s.l.now().UTC()
		exp := now.Add(ttl)
		// Two statements rather than one with OR: each is served by an index, so the serializable reads
		// stay narrow and acquirers of other issuers do not conflict with this one.
		if _, err := tx.Exec(ctx, `DELETE FROM session_leases WHERE id = $1 AND expires_at <= $2`, lease.ID, now); err != nil {
			return fmt.Errorf("sweep expired lease: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM session_leases WHERE issuer = $1 AND expires_at <= $2`, lease.Issuer, now); err != nil {
			return fmt.Errorf("sweep expired leases: %w", err)
		}
		var issuer, user string
		err := tx.QueryRow(ctx, `UPDATE session_leases SET expires_at = $2 WHERE id = $1 RETURNING issuer, "user"`,
			lease.ID, exp).Scan(&issuer, &user)
		switch {
		case err == nil:
			if issuer != lease.Issuer || user != lease.User {
				return fmt.Errorf("id already leased to %s/%s: %w", issuer, user, billing.ErrInvalid)
			}
			return nil // a live lease: renewed
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("renew lease: %w", err)
		}
		userLive, issuerLive, err := countLeases(ctx, tx, now, lease.Issuer, lease.User)
		if err != nil {
			return err
		}
		if err := billing.CheckSessionCaps(lease, userLive, issuerLive, maxUser, maxIssuer); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO session_leases (id, issuer, "user", expires_at) VALUES ($1, $2, $3, $4)`,
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
	var n int64
	err := s.l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		now := s.l.now().UTC()
		tag, err := tx.Exec(ctx, `UPDATE session_leases SET expires_at = $2 WHERE id = $1 AND expires_at > $3`,
			id, now.Add(ttl), now)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("renew session lease %s: %w", id, billing.ClassifyStore(err, nil))
	}
	if n == 0 {
		return fmt.Errorf("renew session lease %s: %w", id, billing.ErrLeaseGone)
	}
	return nil
}

// RenewAll renews every live lease of ids (billing.Sessions), billing.RenewBatch per transaction, and
// returns those that are gone.
func (s *Sessions) RenewAll(ctx context.Context, ids []string, ttl time.Duration) ([]string, error) {
	if err := billing.ValidateRenewAll(ids, ttl); err != nil {
		return nil, err
	}
	var gone []string
	for batch := range slices.Chunk(ids, billing.RenewBatch) {
		var renewed []string
		err := s.l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
			now := s.l.now().UTC()
			rows, err := tx.Query(ctx, `UPDATE session_leases SET expires_at = $2 WHERE id = ANY($1) AND expires_at > $3 RETURNING id`,
				batch, now.Add(ttl), now)
			if err != nil {
				return err
			}
			renewed, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("renew %d session leases: %w", len(batch), billing.ClassifyStore(err, nil))
		}
		gone = append(gone, billing.NotRenewed(batch, renewed)...)
	}
	return gone, nil
}

// Release deletes lease id (billing.Sessions); a missing lease is not an error. An empty id wraps
// billing.ErrInvalid.
func (s *Sessions) Release(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("release: session lease without id: %w", billing.ErrInvalid)
	}
	if err := s.l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM session_leases WHERE id = $1`, id)
		return err
	}); err != nil {
		return fmt.Errorf("release session lease %s: %w", id, billing.ClassifyStore(err, nil))
	}
	return nil
}

// Count returns the live leases of user and of its issuer (billing.Sessions), in one statement.
func (s *Sessions) Count(ctx context.Context, issuer, user string) (userLive, issuerLive int64, err error) {
	if issuer == "" || user == "" {
		return 0, 0, fmt.Errorf("count sessions: issuer %q user %q, need both: %w", issuer, user, billing.ErrInvalid)
	}
	err = s.l.tx(ctx, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		var err error
		userLive, issuerLive, err = countLeases(ctx, tx, s.l.now().UTC(), issuer, user)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("count sessions of %s/%s: %w", issuer, user, billing.ClassifyStore(err, nil))
	}
	return userLive, issuerLive, nil
}

// countLeases counts the live leases of user and of its issuer at now.
func countLeases(ctx context.Context, tx pgx.Tx, now time.Time, issuer, user string) (userLive, issuerLive int64, err error) {
	if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE "user" = $3)::INT8, count(*)::INT8
		FROM session_leases WHERE issuer = $1 AND expires_at > $2`,
		issuer, now, user).Scan(&userLive, &issuerLive); err != nil {
		return 0, 0, fmt.Errorf("count leases: %w", err)
	}
	return userLive, issuerLive, nil
}
