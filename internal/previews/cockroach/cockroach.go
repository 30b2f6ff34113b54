// Package cockroach is the production previews.Store: two tables in the CockroachDB database that spans the
// regions (PostgreSQL in tests), through pgx, so every edge of every region verifies and revokes the same
// previews.
package cockroach

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/previews"
)

// migrations are append-only; see cockroachdb.Migrate.
var migrations = []string{
	`CREATE TABLE preview_keys (
		id  INT   PRIMARY KEY,
		key BYTEA NOT NULL
	)`,
	`CREATE TABLE previews (
		id      TEXT        PRIMARY KEY,
		issuer  TEXT        NOT NULL,
		usr     TEXT        NOT NULL,
		port    INT         NOT NULL,
		public  BOOL        NOT NULL,
		created TIMESTAMPTZ NOT NULL,
		expires TIMESTAMPTZ NOT NULL,
		grnt    TEXT        NOT NULL
	)`,
	`CREATE INDEX previews_owner ON previews (issuer, usr, expires)`,
}

// Store is a previews.Store over CockroachDB (or PostgreSQL).
type Store struct {
	pool *pgxpool.Pool
	srv  cockroachdb.Server
}

var _ previews.Store = (*Store)(nil)

// New returns the store kept through pool (the caller closes it), creating or migrating its tables.
func New(ctx context.Context, pool *pgxpool.Pool) (*Store, error) {
	if pool == nil {
		return nil, errors.New("open previews: a pool is required")
	}
	s := &Store{pool: pool}
	var err error
	if s.srv, err = cockroachdb.Detect(ctx, pool); err != nil {
		return nil, fmt.Errorf("open previews: %w", err)
	}
	if err := cockroachdb.Migrate(ctx, pool, "previews", migrations); err != nil {
		return nil, fmt.Errorf("open previews: %w", err)
	}
	return s, nil
}

// Key returns the signing key, made by the first caller.
func (s *Store) Key(ctx context.Context) ([]byte, error) {
	var key []byte
	err := cockroachdb.ExecuteTx(ctx, s.pool, s.srv, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO preview_keys (id, key) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, previews.NewKey()); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT key FROM preview_keys WHERE id = 1`).Scan(&key)
	})
	if err != nil {
		return nil, fmt.Errorf("preview key: %w", err)
	}
	return key, nil
}

// Create stores p unless its user has max unexpired previews (serializable: two creates cannot both pass
// the count).
func (s *Store) Create(ctx context.Context, p previews.Preview, max int) error {
	err := cockroachdb.ExecuteTx(ctx, s.pool, s.srv, cockroachdb.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM previews WHERE issuer = $1 AND usr = $2 AND expires <= $3`, p.Issuer, p.User, p.Created); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM previews WHERE issuer = $1 AND usr = $2`, p.Issuer, p.User).Scan(&n); err != nil {
			return err
		}
		if n >= max {
			return previews.ErrLimit
		}
		_, err := tx.Exec(ctx, `INSERT INTO previews (id, issuer, usr, port, public, created, expires, grnt)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, p.ID, p.Issuer, p.User, p.Port, p.Public, p.Created, p.Expires, p.Grant)
		return err
	})
	if errors.Is(err, previews.ErrLimit) {
		return err
	}
	if err != nil {
		return fmt.Errorf("create preview: %w", err)
	}
	return nil
}

const columns = `id, issuer, usr, port, public, created, expires, grnt`

func scan(r pgx.Row) (previews.Preview, error) {
	var p previews.Preview
	err := r.Scan(&p.ID, &p.Issuer, &p.User, &p.Port, &p.Public, &p.Created, &p.Expires, &p.Grant)
	p.Created, p.Expires = p.Created.UTC(), p.Expires.UTC()
	return p, err
}

// Get returns the preview id.
func (s *Store) Get(ctx context.Context, id string) (previews.Preview, error) {
	var p previews.Preview
	err := cockroachdb.ExecuteTx(ctx, s.pool, s.srv, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		var err error
		p, err = scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM previews WHERE id = $1`, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return previews.Preview{}, previews.ErrNotFound
	}
	if err != nil {
		return previews.Preview{}, fmt.Errorf("get preview: %w", err)
	}
	return p, nil
}

// List returns the user's unexpired previews, oldest first.
func (s *Store) List(ctx context.Context, issuer, user string, now time.Time) ([]previews.Preview, error) {
	var out []previews.Preview
	err := cockroachdb.ExecuteTx(ctx, s.pool, s.srv, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		out = []previews.Preview{}
		rows, err := tx.Query(ctx, `SELECT `+columns+` FROM previews WHERE issuer = $1 AND usr = $2 AND expires > $3
			ORDER BY created, id`, issuer, user, now)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			p, err := scan(rows)
			if err != nil {
				return err
			}
			out = append(out, p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list previews: %w", err)
	}
	return out, nil
}

// Revoke deletes the user's preview id.
func (s *Store) Revoke(ctx context.Context, issuer, user, id string) error {
	var n int64
	err := cockroachdb.ExecuteTx(ctx, s.pool, s.srv, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM previews WHERE id = $1 AND issuer = $2 AND usr = $3`, id, issuer, user)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("revoke preview: %w", err)
	}
	if n == 0 {
		return previews.ErrNotFound
	}
	return nil
}
