// Package sqlite is the embedded regions.Directory of warren dev: one table in a SQLite file (the
// placements' file in warren dev). Several processes may share the file.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/warren-mesh/warren/internal/regions"
	"github.com/warren-mesh/warren/internal/sqlitedb"
)

// migrations are append-only; see sqlitedb.Migrate.
var migrations = []string{
	`CREATE TABLE region_edges (
		region       TEXT    NOT NULL,
		id           TEXT    NOT NULL,
		url          TEXT    NOT NULL,
		webtransport TEXT    NOT NULL DEFAULT '',
		mesh         TEXT    NOT NULL DEFAULT '',
		draining     INTEGER NOT NULL DEFAULT 0,
		expires      INTEGER NOT NULL, -- Unix nanoseconds UTC
		PRIMARY KEY (region, id)
	)`,
}

// forgetAfter is how long an expired entry is kept before an Announce deletes it.
const forgetAfter = time.Hour

// Directory is a regions.Directory over a SQLite file.
type Directory struct {
	db  *sql.DB
	now func() time.Time
}

var _ regions.Directory = (*Directory)(nil)

// Config configures New.
type Config struct {
	// Path is the SQLite file (required), created if missing.
	Path string
	// Now is the clock that sets and checks expiry (default time.Now).
	Now func() time.Time
}

// New opens (creating and migrating if needed) the directory at cfg.Path.
func New(ctx context.Context, cfg Config) (*Directory, error) {
	if cfg.Path == "" {
		return nil, errors.New("open region directory: Config.Path is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	db, err := sqlitedb.Open(ctx, cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("open region directory: %w", err)
	}
	if err := sqlitedb.Migrate(ctx, db, "regions", migrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("open region directory: %w", err)
	}
	return &Directory{db: db, now: cfg.Now}, nil
}

// Close closes the database.
func (d *Directory) Close() error { return d.db.Close() }

// Announce upserts e with its expiry, and forgets entries expired for over an hour.
func (d *Directory) Announce(ctx context.Context, e regions.Edge, ttl time.Duration) error {
	if err := regions.CheckAnnouncement(e, ttl); err != nil {
		return err
	}
	now := d.now().UTC()
	_, err := d.db.ExecContext(ctx, `INSERT INTO region_edges (region, id, url, webtransport, mesh, draining, expires)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (region, id) DO UPDATE SET url = excluded.url, webtransport = excluded.webtransport,
			mesh = excluded.mesh, draining = excluded.draining, expires = excluded.expires`,
		e.Region, e.ID, e.URL, e.WebTransport, e.Mesh, e.Draining, now.Add(ttl).UnixNano())
	if err == nil {
		_, err = d.db.ExecContext(ctx, `DELETE FROM region_edges WHERE expires < ?`, now.Add(-forgetAfter).UnixNano())
	}
	if err != nil {
		return fmt.Errorf("announce edge %s/%s: %w", e.Region, e.ID, err)
	}
	return nil
}

// Withdraw deletes the entry of (region, id).
func (d *Directory) Withdraw(ctx context.Context, region, id string) error {
	if _, err := d.db.ExecContext(ctx, `DELETE FROM region_edges WHERE region = ? AND id = ?`, region, id); err != nil {
		return fmt.Errorf("withdraw edge %s/%s: %w", region, id, err)
	}
	return nil
}

// Edges lists the entries that have not expired.
func (d *Directory) Edges(ctx context.Context) ([]regions.Edge, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT region, id, url, webtransport, mesh, draining, expires FROM region_edges
		WHERE expires > ? ORDER BY region, id`, d.now().UTC().UnixNano())
	if err != nil {
		return nil, fmt.Errorf("list edges: %w", err)
	}
	defer rows.Close()
	var out []regions.Edge
	for rows.Next() {
		var e regions.Edge
		var expires int64
		if err := rows.Scan(&e.Region, &e.ID, &e.URL, &e.WebTransport, &e.Mesh, &e.Draining, &expires); err != nil {
			return nil, fmt.Errorf("list edges: %w", err)
		}
		e.Expires = time.Unix(0, expires).UTC()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list edges: %w", err)
	}
	return out, nil
}
