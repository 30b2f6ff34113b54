package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/warren-mesh/warren/billing"
)

var _ billing.APIKeys = (*Ledger)(nil)

// CreateAPIKey stores k and the hash of its secret (billing.APIKeys).
func (l *Ledger) CreateAPIKey(ctx context.Context, k billing.APIKey, hash []byte) error {
	if err := k.Validate(); err != nil {
		return fmt.Errorf("create api key: %w", err)
	}
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		if err := issuerRegistered(ctx, tx, k.Issuer); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, issuer, name, hash, created) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`, k.ID, k.Issuer, k.Name, hash, k.Created.UTC().Unix())
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(fmt.Errorf("key id %s is taken: %w", k.ID, billing.ErrConflict), err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create api key of %s: %w", k.Issuer, billing.ClassifyStore(err, nil))
	}
	return nil
}

// ListAPIKeys returns issuer's keys by id (billing.APIKeys).
func (l *Ledger) ListAPIKeys(ctx context.Context, issuer string) ([]billing.APIKey, error) {
	if !billing.ValidName(issuer) {
		return nil, fmt.Errorf("list api keys: bad issuer: %w", billing.ErrInvalid)
	}
	rows, err := l.db.QueryContext(ctx, `SELECT id, issuer, name, created FROM api_keys WHERE issuer = ? ORDER BY id`, issuer)
	if err != nil {
		return nil, fmt.Errorf("list api keys of %s: %w", issuer, billing.ClassifyStore(err, nil))
	}
	defer rows.Close()
	out := []billing.APIKey{}
	for rows.Next() {
		var (
			k       billing.APIKey
			created int64
		)
		if err := rows.Scan(&k.ID, &k.Issuer, &k.Name, &created); err != nil {
			return nil, fmt.Errorf("list api keys of %s: %w", issuer, billing.ClassifyStore(err, nil))
		}
		k.Created = time.Unix(created, 0).UTC()
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys of %s: %w", issuer, billing.ClassifyStore(err, nil))
	}
	return out, nil
}

// RevokeAPIKey deletes issuer's key id (billing.APIKeys).
func (l *Ledger) RevokeAPIKey(ctx context.Context, issuer, id string) error {
	if !billing.ValidName(issuer) || !billing.ValidAPIKeyID(id) {
		return fmt.Errorf("revoke api key: bad issuer or id: %w", billing.ErrInvalid)
	}
	res, err := l.db.ExecContext(ctx, `DELETE FROM api_keys WHERE id = ? AND issuer = ?`, id, issuer)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return fmt.Errorf("revoke api key %s of %s: %w", id, issuer, billing.ClassifyStore(err, nil))
	}
	if n == 0 {
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
		k       billing.APIKey
		hash    []byte
		created int64
	)
	err := l.db.QueryRowContext(ctx, `SELECT id, issuer, name, hash, created FROM api_keys WHERE id = ?`, id).
		Scan(&k.ID, &k.Issuer, &k.Name, &hash, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return billing.APIKey{}, nil, fmt.Errorf("lookup api key %s: %w", id, billing.ErrNotFound)
	}
	if err != nil {
		return billing.APIKey{}, nil, fmt.Errorf("lookup api key %s: %w", id, billing.ClassifyStore(err, nil))
	}
	k.Created = time.Unix(created, 0).UTC()
	return k, hash, nil
}

// issuerRegistered is nil when iss is registered, else an error wrapping billing.ErrNotFound.
func issuerRegistered(ctx context.Context, tx *sql.Tx, iss string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM issuers WHERE id = ?`, iss).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("issuer %q is not registered: %w", iss, billing.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("read issuer: %w", err)
	}
	return nil
}
