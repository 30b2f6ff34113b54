// Package cockroach is the production regions.Directory: one table in the CockroachDB database that spans
// the regions (PostgreSQL in tests), through pgx.
package cockroach

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/regions"
)

// migrations are append-only; see cockroachdb.Migrate.
var migrations = []string{
	`CREATE TABLE region_edges (
		region       TEXT        NOT NULL,
		id           TEXT        NOT NULL,
		url          TEXT        NOT NULL,
		webtransport TEXT        NOT NULL DEFAULT '',
		mesh         TEXT        NOT NULL DEFAULT '',
		draining     BOOL        NOT NULL DEFAULT false,
		expires      TIMESTAMPTZ NOT NULL,
		PRIMARY KEY (region, id)
	)`,
}

// forgetAfter is how long an expired entry is kept before an Announce deletes it.
const forgetAfter = time.Hour

// Directory is a regions.Directory over CockroachDB (or PostgreSQL).
type Directory struct {
	pool *pgxpool.Pool
	srv  cockroachdb.Server
	now  func() time.Time
}

var _ regions.Directory = (*Directory)(nil)

// Config configures New.
type Config struct {
	// Pool is the database (required); the caller closes it after the last call.
	Pool *pgxpool.Pool
	// Now is the clock that sets and checks expiry (default time.Now).
	Now func() time.Time
}

// New returns the directory stored through cfg.Pool, creating or migrating its table if needed.
func New(ctx context.Context, cfg Config) (*Directory, error) {
	if cfg.Pool == nil {
		return nil, errors.New("open region directory: Config.Pool is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &Directory{pool: cfg.Pool, now: cfg.Now}
	var err error
	if d.srv, err = cockroachdb.Detect(ctx, cfg.Pool); err != nil {
		return nil, fmt.Errorf("open region directory: %w", err)
	}
	if err := cockroachdb.Migrate(ctx, cfg.Pool, "regions", migrations); err != nil {
		return nil, fmt.Errorf("open region directory: %w", err)
	}
	return d, nil
}

// Announce upserts e with its expiry, and forgets entries expired for over an hour.
func (d *Directory) Announce(ctx context.Context, e regions.Edge, ttl time.Duration) error {
	if err := regions.CheckAnnouncement(e, ttl); err != nil {
		return err
	}
	now := d.now().UTC()
	err := cockroachdb.ExecuteTx(ctx, d.pool, d.srv, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO region_edges (region, id, url, webtransport, mesh, draining, expires)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (region, id) DO UPDATE SET url = excluded.url, webtransport = excluded.webtransport,
				mesh = excluded.mesh, draining = excluded.draining, expires = excluded.expires`,
			e.Region, e.ID, e.URL, e.WebTransport, e.Mesh, e.Draining, now.Add(ttl)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM region_edges WHERE expires < $1`, now.Add(-forgetAfter))
		return err
	})
	if err != nil {
		return fmt.Errorf("announce edge %s/%s: %w", e.Region, e.ID, err)
	}
	return nil
}

// Withdraw deletes the entry of (region, id).
func (d *Directory) Withdraw(ctx context.Context, region, id string) error {
	err := cockroachdb.ExecuteTx(ctx, d.pool, d.srv, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM region_edges WHERE region = $1 AND id = $2`, region, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("withdraw edge %s/%s: %w", region, id, err)
	}
	return nil
}

// Edges lists the entries that have not expired.
func (d *Directory) Edges(ctx context.Context) ([]regions.Edge, error) {
	var out []regions.Edge
	err := cockroachdb.ExecuteTx(ctx, d.pool, d.srv, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, `SELECT region, id, url, webtransport, mesh, draining, expires FROM region_edges
			WHERE expires > $1 ORDER BY region, id`, d.now().UTC())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e regions.Edge
			if err := rows.Scan(&e.Region, &e.ID, &e.URL, &e.WebTransport, &e.Mesh, &e.Draining, &e.Expires); err != nil {
				return err
			}
			e.Expires = e.Expires.UTC()
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list edges: %w", err)
	}
	return out, nil
}
