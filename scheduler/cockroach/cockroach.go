// Package cockroach is the production scheduler.Placements: one row per (issuer, user) in CockroachDB (and
// in PostgreSQL, its stand-in in tests), through pgx. A claim is one compare-and-set on the epoch in a
// SERIALIZABLE transaction, so of any number of concurrent claims with the same expected epoch, in any
// number of processes and regions, exactly one wins; updates are fenced by the epoch (docs/ARCHITECTURE.md#placements).
package cockroach

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/scheduler"
)

// migrations are append-only; see cockroachdb.Migrate.
var migrations = []string{
	`CREATE TABLE placements (
		issuer  TEXT        NOT NULL,
		"user"  TEXT        NOT NULL,
		region  TEXT        NOT NULL,
		epoch   INT8        NOT NULL CHECK (epoch > 0),
		state   TEXT        NOT NULL CHECK (state IN ('starting', 'running', 'asleep')),
		alloc   TEXT        NOT NULL DEFAULT '',
		updated TIMESTAMPTZ NOT NULL,
		PRIMARY KEY (issuer, "user")
	)`,
	`ALTER TABLE placements ADD COLUMN meter TEXT NOT NULL DEFAULT ''`, // scheduler.EncodeMeter
	`CREATE INDEX placements_region_state ON placements (region, state)`,
	`ALTER TABLE placements ADD COLUMN lease TIMESTAMPTZ`, // NULL: none
}

// multiRegionMigrations run only on a multi-region CockroachDB database (cockroachdb.IsMultiRegion), as
// the schema "placements-multiregion": PostgreSQL and single-region CockroachDB reject table localities.
// REGIONAL BY ROW homes each placement in the region of the edge that first claimed it, where its user is
// usually served, and keeps (issuer, user) unique across regions, which is what makes a claim a global
// compare-and-set.
var multiRegionMigrations = []string{
	`ALTER TABLE placements SET LOCALITY REGIONAL BY ROW`,
}

// Placements is a scheduler.Placements over a CockroachDB (or PostgreSQL) database. Safe for concurrent
// use, by any number of processes on one database.
type Placements struct {
	pool *pgxpool.Pool
	srv  cockroachdb.Server
	now  func() time.Time
}

var _ scheduler.Placements = (*Placements)(nil)

// Config configures New.
type Config struct {
	// Pool is the database the placements are stored in (required). The caller keeps ownership of it and
	// closes it after the last call.
	Pool *pgxpool.Pool
	// Now is the clock that stamps Placement.Updated (default time.Now).
	Now func() time.Time
}

// New returns the placements stored through cfg.Pool, creating or migrating the table if needed (several
// processes may do so at once). A Config without Pool is an error.
func New(ctx context.Context, cfg Config) (*Placements, error) {
	if cfg.Pool == nil {
		return nil, errors.New("open placements: Config.Pool is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pool := cfg.Pool
	p := &Placements{pool: pool, now: cfg.Now}
	var err error
	if p.srv, err = cockroachdb.Detect(ctx, pool); err != nil {
		return nil, fmt.Errorf("open placements: %w", err)
	}
	if err := cockroachdb.Migrate(ctx, pool, "placements", migrations); err != nil {
		return nil, fmt.Errorf("open placements: %w", err)
	}
	multi, err := cockroachdb.IsMultiRegion(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("open placements: %w", err)
	}
	if multi {
		if err := cockroachdb.Migrate(ctx, pool, "placements-multiregion", multiRegionMigrations); err != nil {
			return nil, fmt.Errorf("open placements: %w", err)
		}
	}
	return p, nil
}

// Get returns the placement of (issuer, user) or an error wrapping scheduler.ErrNotFound.
func (p *Placements) Get(ctx context.Context, issuer, user string) (scheduler.Placement, error) {
	pl := scheduler.Placement{Issuer: issuer, User: user}
	var state, meter string
	var lease *time.Time
	err := p.tx(ctx, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT region, epoch, state, alloc, updated, meter, lease FROM placements
			WHERE issuer = $1 AND "user" = $2`, issuer, user).Scan(&pl.Region, &pl.Epoch, &state, &pl.Alloc, &pl.Updated, &meter, &lease)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return scheduler.Placement{}, fmt.Errorf("get placement %s/%s: %w", issuer, user, scheduler.ErrNotFound)
	}
	if err == nil {
		pl.Meter, err = scheduler.DecodeMeter(meter)
	}
	if err != nil {
		return scheduler.Placement{}, fmt.Errorf("get placement %s/%s: %w", issuer, user, err)
	}
	pl.State, pl.Updated, pl.Lease = scheduler.State(state), pl.Updated.UTC(), storedLease(lease)
	return pl, nil
}

// storedLease reads a stored lease (NULL: none).
func storedLease(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// leaseArg is how a lease is stored.
func leaseArg(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// Claim is one compare-and-set statement in a serializable transaction: an INSERT that does nothing on an
// existing row when expect is 0, otherwise an UPDATE guarded by the expected epoch; exactly one row changes
// or the claim lost (scheduler.ErrConflict). A concurrent claim that commits first makes this one's
// transaction fail serialization; on the retry the row no longer matches, so it loses cleanly.
//
// Claim is not idempotent — run twice, the second run finds the epoch moved and reports ErrConflict — so
// an ambiguous commit (the connection failed during COMMIT) is returned as an error, classified
// cockroachdb.Ambiguous: Get tells whether this claim won.
func (p *Placements) Claim(ctx context.Context, issuer, user, region string, expect int64, lease time.Time) (scheduler.Placement, error) {
	if issuer == "" || user == "" || region == "" {
		return scheduler.Placement{}, fmt.Errorf("claim placement %s/%s in %q: empty issuer, user or region", issuer, user, region)
	}
	if expect < 0 {
		return scheduler.Placement{}, fmt.Errorf("claim placement %s/%s at epoch %d: %w", issuer, user, expect, scheduler.ErrConflict)
	}
	now := p.now().UTC()
	var n int64
	var held *scheduler.OwnedError
	err := p.tx(ctx, cockroachdb.TxOptions{}, func(tx pgx.Tx) error {
		var sql string
		args := []any{issuer, user, region, now, leaseArg(lease)}
		if expect == 0 {
			sql = `INSERT INTO placements (issuer, "user", region, epoch, state, alloc, updated, lease)
				VALUES ($1, $2, $3, 1, 'starting', '', $4, $5)
				ON CONFLICT (issuer, "user") DO NOTHING`
		} else {
			sql = `UPDATE placements SET region = $3, epoch = epoch + 1, state = 'starting', alloc = '', meter = '', updated = $4, lease = $5
				WHERE issuer = $1 AND "user" = $2 AND epoch = $6
				AND (region = $3 OR state = 'asleep' OR lease IS NULL OR lease <= $4)`
			args = append(args, expect)
		}
		tag, err := tx.Exec(ctx, sql, args...)
		if n, held = tag.RowsAffected(), nil; err != nil || n == 1 || expect == 0 {
			return err
		}
		// Refused: held by another region, or another claim won (read in the same transaction).
		var stored scheduler.Placement
		var state string
		var storedLeaseAt *time.Time
		err = tx.QueryRow(ctx, `SELECT region, epoch, state, lease FROM placements WHERE issuer = $1 AND "user" = $2`,
			issuer, user).Scan(&stored.Region, &stored.Epoch, &state, &storedLeaseAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		stored.State, stored.Lease = scheduler.State(state), storedLease(storedLeaseAt)
		if err == nil && stored.Epoch == expect && scheduler.Holds(stored, region, now) {
			held = &scheduler.OwnedError{Region: stored.Region, Epoch: stored.Epoch, Lease: stored.Lease}
		}
		return err
	})
	if err != nil {
		return scheduler.Placement{}, fmt.Errorf("claim placement %s/%s at epoch %d: %w", issuer, user, expect, err)
	}
	if held != nil {
		return scheduler.Placement{}, fmt.Errorf("claim placement %s/%s at epoch %d: %w", issuer, user, expect, held)
	}
	if n != 1 {
		return scheduler.Placement{}, fmt.Errorf("claim placement %s/%s at epoch %d: %w", issuer, user, expect, scheduler.ErrConflict)
	}
	return scheduler.Placement{
		Issuer: issuer, User: user, Region: region,
		Epoch: expect + 1, State: scheduler.StateStarting, Updated: now, Lease: storedLease(leaseArg(lease)),
	}, nil
}

// Renew extends the lease under the stored epoch (see fenced); it never shortens it (GREATEST ignores a
// NULL on either side).
func (p *Placements) Renew(ctx context.Context, issuer, user string, epoch int64, lease time.Time) error {
	return p.fenced(ctx, "renew lease of placement", issuer, user, epoch, `lease = GREATEST(lease, $4::TIMESTAMPTZ)`, leaseArg(lease))
}

// Update changes state and alloc only under the stored epoch (see fenced).
func (p *Placements) Update(ctx context.Context, issuer, user string, epoch int64, state scheduler.State, alloc string) error {
	switch state {
	case scheduler.StateStarting, scheduler.StateRunning, scheduler.StateAsleep:
	default:
		return fmt.Errorf("update placement %s/%s: unknown state %q", issuer, user, state)
	}
	return p.fenced(ctx, "update placement", issuer, user, epoch, `state = $4, alloc = $5`, string(state), alloc)
}

// SetMeter stores m under the stored epoch (see fenced).
func (p *Placements) SetMeter(ctx context.Context, issuer, user string, epoch int64, m scheduler.Meter) error {
	enc, err := scheduler.EncodeMeter(m)
	if err != nil {
		return fmt.Errorf("set meter of placement %s/%s: %w", issuer, user, err)
	}
	return p.fenced(ctx, "set meter of placement", issuer, user, epoch, `meter = $4`, enc)
}

// fenced runs UPDATE placements SET <set>, updated = now for the row of (issuer, user) at epoch; set's
// placeholders start at $4. When no row changes, a second read inside the same transaction tells a
// missing placement (ErrNotFound) from a different epoch (ErrStaleEpoch, whether the caller's epoch is
// older or, from a confused caller, newer). Setting the same values twice is harmless, so an ambiguous
// commit is resolved by running the update again.
func (p *Placements) fenced(ctx context.Context, what, issuer, user string, epoch int64, set string, args ...any) error {
	now := p.now().UTC()
	args = append([]any{issuer, user, epoch}, args...)
	args = append(args, now)
	err := p.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE placements SET `+set+fmt.Sprintf(`, updated = $%d`, len(args))+`
			WHERE issuer = $1 AND "user" = $2 AND epoch = $3`, args...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var stored int64
		err = tx.QueryRow(ctx, `SELECT epoch FROM placements WHERE issuer = $1 AND "user" = $2`, issuer, user).Scan(&stored)
		if errors.Is(err, pgx.ErrNoRows) {
			return scheduler.ErrNotFound
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("stored %d: %w", stored, scheduler.ErrStaleEpoch)
	})
	if err != nil {
		return fmt.Errorf("%s %s/%s at epoch %d: %w", what, issuer, user, epoch, err)
	}
	return nil
}

// Active lists region's starting and running placements.
func (p *Placements) Active(ctx context.Context, region string) ([]scheduler.Placement, error) {
	var out []scheduler.Placement
	err := p.tx(ctx, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, `SELECT issuer, "user", epoch, state, alloc, updated, meter, lease FROM placements
			WHERE region = $1 AND state IN ('starting', 'running') ORDER BY issuer, "user"`, region)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			pl := scheduler.Placement{Region: region}
			var state, meter string
			var lease *time.Time
			if err := rows.Scan(&pl.Issuer, &pl.User, &pl.Epoch, &state, &pl.Alloc, &pl.Updated, &meter, &lease); err != nil {
				return err
			}
			pl.State = scheduler.State(state)
			pl.Meter, _ = scheduler.DecodeMeter(meter) // unreadable: unset (Placements.Active)
			pl.Updated, pl.Lease = pl.Updated.UTC(), storedLease(lease)
			out = append(out, pl)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list active placements in %s: %w", region, err)
	}
	return out, nil
}

// tx runs f in one serializable transaction, retried on serialization failures (cockroachdb.ExecuteTx).
func (p *Placements) tx(ctx context.Context, opts cockroachdb.TxOptions, f func(tx pgx.Tx) error) error {
	return cockroachdb.ExecuteTx(ctx, p.pool, p.srv, opts, f)
}
