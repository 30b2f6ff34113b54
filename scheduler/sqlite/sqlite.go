// Package sqlite is the embedded scheduler.Placements used by warren dev: one SQLite file, claims as a
// single compare-and-set statement, updates fenced by epoch. Several processes may share the file.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/warren-mesh/warren/internal/sqlitedb"
	"github.com/warren-mesh/warren/scheduler"
)

// migrations are append-only; see sqlitedb.Migrate.
var migrations = []string{
	`CREATE TABLE placements (
		issuer  TEXT    NOT NULL,
		"user"  TEXT    NOT NULL,
		region  TEXT    NOT NULL,
		epoch   INTEGER NOT NULL CHECK (epoch > 0),
		state   TEXT    NOT NULL CHECK (state IN ('starting', 'running', 'asleep')),
		alloc   TEXT    NOT NULL DEFAULT '',
		updated INTEGER NOT NULL, -- Unix nanoseconds UTC
		PRIMARY KEY (issuer, "user")
	)`,
	`ALTER TABLE placements ADD COLUMN meter TEXT NOT NULL DEFAULT ''`, // scheduler.EncodeMeter
	`CREATE INDEX placements_region_state ON placements (region, state)`,
	`ALTER TABLE placements ADD COLUMN lease INTEGER NOT NULL DEFAULT 0`, // Unix nanoseconds UTC; 0: none
}

// Placements is a scheduler.Placements over a SQLite file.
type Placements struct {
	db  *sql.DB
	now func() time.Time
}

var _ scheduler.Placements = (*Placements)(nil)

// Config configures New.
type Config struct {
	// Path is the placements' SQLite file (required), created if missing. Several processes may share it.
	Path string
	// Now is the clock that stamps Placement.Updated (default time.Now).
	Now func() time.Time
}

// New opens (creating and migrating if needed) the placements database at cfg.Path. A Config without Path
// is an error.
func New(ctx context.Context, cfg Config) (*Placements, error) {
	if cfg.Path == "" {
		return nil, errors.New("open placements: Config.Path is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Placements{now: cfg.Now}
	db, err := sqlitedb.Open(ctx, cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("open placements: %w", err)
	}
	if err := sqlitedb.Migrate(ctx, db, "placements", migrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("open placements: %w", err)
	}
	p.db = db
	return p, nil
}

// Close closes the database. It is safe to call more than once.
func (p *Placements) Close() error {
	if err := p.db.Close(); err != nil {
		return fmt.Errorf("close placements: %w", err)
	}
	return nil
}

func (p *Placements) Get(ctx context.Context, issuer, user string) (scheduler.Placement, error) {
	pl := scheduler.Placement{Issuer: issuer, User: user}
	var updated, lease int64
	var meter string
	err := p.db.QueryRowContext(ctx, `SELECT region, epoch, state, alloc, updated, meter, lease FROM placements
		WHERE issuer = ? AND "user" = ?`, issuer, user).Scan(&pl.Region, &pl.Epoch, &pl.State, &pl.Alloc, &updated, &meter, &lease)
	if errors.Is(err, sql.ErrNoRows) {
		return scheduler.Placement{}, fmt.Errorf("get placement %s/%s: %w", issuer, user, scheduler.ErrNotFound)
	}
	if err == nil {
		pl.Meter, err = scheduler.DecodeMeter(meter)
	}
	if err != nil {
		return scheduler.Placement{}, fmt.Errorf("get placement %s/%s: %w", issuer, user, err)
	}
	pl.Updated, pl.Lease = time.Unix(0, updated).UTC(), unixLease(lease)
	return pl, nil
}

// unixLease reads a stored lease (0: none).
func unixLease(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// leaseNanos is how a lease is stored.
func leaseNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// Active lists region's starting and running placements.
func (p *Placements) Active(ctx context.Context, region string) ([]scheduler.Placement, error) {
	rows, err := p.db.QueryContext(ctx, `SELECT issuer, "user", epoch, state, alloc, updated, meter, lease FROM placements
		WHERE region = ? AND state IN ('starting', 'running') ORDER BY issuer, "user"`, region)
	if err != nil {
		return nil, fmt.Errorf("list active placements in %s: %w", region, err)
	}
	defer rows.Close()
	var out []scheduler.Placement
	for rows.Next() {
		pl := scheduler.Placement{Region: region}
		var updated, lease int64
		var meter string
		if err := rows.Scan(&pl.Issuer, &pl.User, &pl.Epoch, &pl.State, &pl.Alloc, &updated, &meter, &lease); err != nil {
			return nil, fmt.Errorf("list active placements in %s: %w", region, err)
		}
		pl.Meter, _ = scheduler.DecodeMeter(meter) // unreadable: unset (Placements.Active)
		pl.Updated, pl.Lease = time.Unix(0, updated).UTC(), unixLease(lease)
		out = append(out, pl)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list active placements in %s: %w", region, err)
	}
	return out, nil
}

// Claim is one statement: an INSERT that does nothing on an existing row when expect is 0, otherwise an
// UPDATE guarded by the expected epoch and by the lease (scheduler.Holds). SQLite runs it under the
// database write lock, so of any number of concurrent claims with the same expect exactly one changes a
// row. A refused claim reads the row to tell a held placement (*scheduler.OwnedError) from a lost race.
func (p *Placements) Claim(ctx context.Context, issuer, user, region string, expect int64, lease time.Time) (scheduler.Placement, error) {
	if issuer == "" || user == "" || region == "" {
		return scheduler.Placement{}, fmt.Errorf("claim placement %s/%s in %q: empty issuer, user or region", issuer, user, region)
	}
	now := p.now().UTC()
	pl := scheduler.Placement{
		Issuer: issuer, User: user, Region: region,
		Epoch: expect + 1, State: scheduler.StateStarting, Updated: now, Lease: unixLease(leaseNanos(lease)),
	}
	var (
		res sql.Result
		err error
	)
	switch {
	case expect < 0:
		return scheduler.Placement{}, fmt.Errorf("claim placement %s/%s at epoch %d: %w", issuer, user, expect, scheduler.ErrConflict)
	case expect == 0:
		res, err = p.db.ExecContext(ctx, `INSERT INTO placements (issuer, "user", region, epoch, state, alloc, updated, lease)
			VALUES (?, ?, ?, 1, 'starting', '', ?, ?)
			ON CONFLICT (issuer, "user") DO NOTHING`, issuer, user, region, now.UnixNano(), leaseNanos(lease))
	default:
		res, err = p.db.ExecContext(ctx, `UPDATE placements
			SET region = ?, epoch = epoch + 1, state = 'starting', alloc = '', meter = '', updated = ?, lease = ?
			WHERE issuer = ? AND "user" = ? AND epoch = ? AND (region = ? OR state = 'asleep' OR lease <= ?)`,
			region, now.UnixNano(), leaseNanos(lease), issuer, user, expect, region, now.UnixNano())
	}
	if err != nil {
		return scheduler.Placement{}, fmt.Errorf("claim placement %s/%s at epoch %d: %w", issuer, user, expect, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return scheduler.Placement{}, fmt.Errorf("claim placement %s/%s at epoch %d: %w", issuer, user, expect, err)
	}
	if n != 1 {
		return scheduler.Placement{}, fmt.Errorf("claim placement %s/%s at epoch %d: %w", issuer, user, expect, p.refusal(ctx, issuer, user, region, expect, now))
	}
	return pl, nil
}

// refusal tells why a claim changed no row: the placement is held by another region (*OwnedError), or
// another claim won (ErrConflict).
func (p *Placements) refusal(ctx context.Context, issuer, user, region string, expect int64, now time.Time) error {
	if stored, err := p.Get(ctx, issuer, user); err == nil && stored.Epoch == expect && scheduler.Holds(stored, region, now) {
		return &scheduler.OwnedError{Region: stored.Region, Epoch: stored.Epoch, Lease: stored.Lease}
	}
	return scheduler.ErrConflict
}

// Renew extends the lease under the stored epoch (see fenced); it never shortens it.
func (p *Placements) Renew(ctx context.Context, issuer, user string, epoch int64, lease time.Time) error {
	return p.fenced(ctx, "renew lease of placement", issuer, user, epoch, `lease = MAX(lease, ?)`, leaseNanos(lease))
}

// Update changes state and alloc only under the stored epoch (see fenced).
func (p *Placements) Update(ctx context.Context, issuer, user string, epoch int64, state scheduler.State, alloc string) error {
	switch state {
	case scheduler.StateStarting, scheduler.StateRunning, scheduler.StateAsleep:
	default:
		return fmt.Errorf("update placement %s/%s: unknown state %q", issuer, user, state)
	}
	return p.fenced(ctx, "update placement", issuer, user, epoch, `state = ?, alloc = ?`, string(state), alloc)
}

// SetMeter stores m under the stored epoch (see fenced).
func (p *Placements) SetMeter(ctx context.Context, issuer, user string, epoch int64, m scheduler.Meter) error {
	enc, err := scheduler.EncodeMeter(m)
	if err != nil {
		return fmt.Errorf("set meter of placement %s/%s: %w", issuer, user, err)
	}
	return p.fenced(ctx, "set meter of placement", issuer, user, epoch, `meter = ?`, enc)
}

// fenced runs UPDATE placements SET <set>, updated = now for the row of (issuer, user) at epoch. When no
// row changes, a second read inside the same transaction tells a missing placement (ErrNotFound) from a
// different epoch (ErrStaleEpoch, whether the caller's epoch is older or, from a confused caller, newer).
func (p *Placements) fenced(ctx context.Context, what, issuer, user string, epoch int64, set string, args ...any) error {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s %s/%s: begin: %w", what, issuer, user, err)
	}
	defer tx.Rollback()
	args = append(args, p.now().UTC().UnixNano(), issuer, user, epoch)
	res, err := tx.ExecContext(ctx, `UPDATE placements SET `+set+`, updated = ?
		WHERE issuer = ? AND "user" = ? AND epoch = ?`, args...)
	if err != nil {
		return fmt.Errorf("%s %s/%s at epoch %d: %w", what, issuer, user, epoch, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s %s/%s at epoch %d: %w", what, issuer, user, epoch, err)
	}
	if n == 0 {
		var stored int64
		err := tx.QueryRowContext(ctx, `SELECT epoch FROM placements WHERE issuer = ? AND "user" = ?`, issuer, user).Scan(&stored)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%s %s/%s at epoch %d: %w", what, issuer, user, epoch, scheduler.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("%s %s/%s at epoch %d: %w", what, issuer, user, epoch, err)
		}
		return fmt.Errorf("%s %s/%s at epoch %d, stored %d: %w", what, issuer, user, epoch, stored, scheduler.ErrStaleEpoch)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s %s/%s at epoch %d: commit: %w", what, issuer, user, epoch, err)
	}
	return nil
}
