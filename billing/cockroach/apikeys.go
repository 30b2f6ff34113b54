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

var _ billing.APIKeys = (*Ledger)(nil)

// CreateAPIKey stores k and the hash of its secret (billing.APIKeys). It is not retried after a commit of
// unknown outcome: a second insert would find its own row and answer ErrConflict.
func (l *Ledger) CreateAPIKey(ctx context.Context, k billing.APIKey, hash []byte) error {
	if err := k.Validate(); err != nil {
		return fmt.Errorf("create api key: %w", err)
	}
	err := l.tx(ctx, cockroachdb.TxOptions{}, func(tx pgx.Tx) error {
		if err := issuerRegistered(ctx, tx, k.Issuer); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO api_keys (id, issuer, name, hash, created) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (id) DO NOTHING`, k.ID, k.Issuer, k.Name, hash, time.Unix(k.Created.Unix(), 0).UTC())
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("key id %s is taken: %w", k.ID, billing.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create api key of %s: %w", k.Issuer, billing.ClassifyStore(err, transient))
	}
	return nil
}

// ListAPIKeys returns issuer's keys by id (billing.APIKeys).
func (l *Ledger) ListAPIKeys(ctx context.Context, issuer string) ([]billing.APIKey, error) {
	if !billing.ValidName(issuer) {
		return nil, fmt.Errorf("list api keys: bad issuer: %w", billing.ErrInvalid)
	}
	var out []billing.APIKey
	err := l.tx(ctx, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		out = []billing.APIKey{}
		rows, err := tx.Query(ctx, `SELECT id, issuer, name, created FROM api_keys WHERE issuer = $1 ORDER BY id`, issuer)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k billing.APIKey
			if err := rows.Scan(&k.ID, &k.Issuer, &k.Name, &k.Created); err != nil {
				return err
			}
			k.Created = k.Created.UTC()
			out = append(out, k)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list api keys of %s: %w", issuer, billing.ClassifyStore(err, transient))
	}
	return out, nil
}

// RevokeAPIKey deletes issuer's key id (billing.APIKeys).
func (l *Ledger) RevokeAPIKey(ctx context.Context, issuer, id string) error {
	if !billing.ValidName(issuer) || !billing.ValidAPIKeyID(id) {
		return fmt.Errorf("revoke api key: bad issuer or id: %w", billing.ErrInvalid)
	}
	var deleted int64
	err := l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM api_keys WHERE id = $1 AND issuer = $2`, id, issuer)
		deleted = tag.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("revoke api key %s of %s: %w", id, issuer, billing.ClassifyStore(err, transient))
	}
	if deleted == 0 {
		return fmt.Errorf("revoke api key %s of %s: no such key: %w", id, issuer, billing.ErrNotFound)
	}
	return nil
}

// LookupAPIKey returns key id and its secret's hash (billing.APIKeys).
func (l *Ledger) LookupAPIKey(ctx context.Context, id string) (billing.APIKey, []byte, error) {
	if !billing.ValidAPIKeyID(id) {
		return billing.APIKey{}, nil, fmt.Errorf("lookup api key: bad id: %w", billing.ErrInvalid)
	}
	var (
		k    billing.APIKey
		hash []byte
	)
	err := l.tx(ctx, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT id, issuer, name, hash, created FROM api_keys WHERE id = $1`, id).
			Scan(&k.ID, &k.Issuer, &k.Name, &hash, &k.Created)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return billing.APIKey{}, nil, fmt.Errorf("lookup api key %s: %w", id, billing.ErrNotFound)
	}
	if err != nil {
		return billing.APIKey{}, nil, fmt.Errorf("lookup api key %s: %w", id, billing.ClassifyStore(err, transient))
	}
	k.Created = k.Created.UTC()
	return k, hash, nil
}

// issuerRegistered is nil when iss is registered, else an error wrapping billing.ErrNotFound.
func issuerRegistered(ctx context.Context, tx pgx.Tx, iss string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM issuers WHERE id = $1`, iss).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("issuer %q is not registered: %w", iss, billing.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("read issuer: %w", err)
	}
	return nil
}
