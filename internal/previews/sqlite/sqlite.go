// Package sqlite is the embedded previews.Store of warren dev: two tables in a SQLite file (the placements'
// file in warren dev). Several processes may share the file.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/warren-mesh/warren/internal/previews"
	"github.com/warren-mesh/warren/internal/sqlitedb"
)

// migrations are append-only; see sqlitedb.Migrate.
var migrations = []string{
	`CREATE TABLE preview_keys (
		id  INTEGER PRIMARY KEY,
		key BLOB NOT NULL
	)`,
	`CREATE TABLE previews (
		id      TEXT    PRIMARY KEY,
		issuer  TEXT    NOT NULL,
		user    TEXT    NOT NULL,
		port    INTEGER NOT NULL,
		public  INTEGER NOT NULL,
		created INTEGER NOT NULL, -- Unix nanoseconds UTC
		expires INTEGER NOT NULL, -- Unix nanoseconds UTC
		grant_  TEXT    NOT NULL
	)`,
	`CREATE INDEX previews_owner ON previews (issuer, user, expires)`,
}

// Store is a previews.Store over a SQLite file.
type Store struct {
	db *sql.DB
}

var _ previews.Store = (*Store)(nil)

// Open opens (creating and migrating if needed) the store at path.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("open previews: a path is required")
	}
	db, err := sqlitedb.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("open previews: %w", err)
	}
	if err := sqlitedb.Migrate(ctx, db, "previews", migrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("open previews: %w", err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Key returns the signing key, made by the first caller.
func (s *Store) Key(ctx context.Context) ([]byte, error) {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO preview_keys (id, key) VALUES (1, ?) ON CONFLICT (id) DO NOTHING`, previews.NewKey()); err != nil {
		return nil, fmt.Errorf("preview key: %w", err)
	}
	var key []byte
	if err := s.db.QueryRowContext(ctx, `SELECT key FROM preview_keys WHERE id = 1`).Scan(&key); err != nil {
		return nil, fmt.Errorf("preview key: %w", err)
	}
	return key, nil
}

// Create stores p unless its user has max unexpired previews.
func (s *Store) Create(ctx context.Context, p previews.Preview, max int) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("create preview: %w", err)
	}
	defer tx.Rollback()
	// The write first: SQLite then holds the write lock for the count, so two creates cannot both pass it.
	if _, err := tx.ExecContext(ctx, `DELETE FROM previews WHERE expires <= ?`, p.Created.UnixNano()); err != nil {
		return fmt.Errorf("create preview: %w", err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM previews WHERE issuer = ? AND user = ?`, p.Issuer, p.User).Scan(&n); err != nil {
		return fmt.Errorf("create preview: %w", err)
	}
	if n >= max {
		return previews.ErrLimit
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO previews (id, issuer, user, port, public, created, expires, grant_)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, p.ID, p.Issuer, p.User, p.Port, p.Public, p.Created.UnixNano(), p.Expires.UnixNano(), p.Grant); err != nil {
		return fmt.Errorf("create preview: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("create preview: %w", err)
	}
	return nil
}

const columns = `id, issuer, user, port, public, created, expires, grant_`

type scanner interface{ Scan(...any) error }

func scan(r scanner) (previews.Preview, error) {
	var p previews.Preview
	var created, expires int64
	err := r.Scan(&p.ID, &p.Issuer, &p.User, &p.Port, &p.Public, &created, &expires, &p.Grant)
	p.Created, p.Expires = time.Unix(0, created).UTC(), time.Unix(0, expires).UTC()
	return p, err
}

// Get returns the preview id.
func (s *Store) Get(ctx context.Context, id string) (previews.Preview, error) {
	p, err := scan(s.db.QueryRowContext(ctx, `SELECT `+columns+` FROM previews WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return previews.Preview{}, previews.ErrNotFound
	}
	if err != nil {
		return previews.Preview{}, fmt.Errorf("get preview: %w", err)
	}
	return p, nil
}

// List returns the user's unexpired previews, oldest first.
func (s *Store) List(ctx context.Context, issuer, user string, now time.Time) ([]previews.Preview, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+columns+` FROM previews WHERE issuer = ? AND user = ? AND expires > ?
		ORDER BY created, id`, issuer, user, now.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("list previews: %w", err)
	}
	defer rows.Close()
	out := []previews.Preview{}
	for rows.Next() {
		p, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("list previews: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list previews: %w", err)
	}
	return out, nil
}

// Revoke deletes the user's preview id.
func (s *Store) Revoke(ctx context.Context, issuer, user, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM previews WHERE id = ? AND issuer = ? AND user = ?`, id, issuer, user)
	if err != nil {
		return fmt.Errorf("revoke preview: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("revoke preview: %w", err)
	} else if n == 0 {
		return previews.ErrNotFound
	}
	return nil
}
