package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// RateBuckets is billing.RateBuckets on a Ledger's database and clock.
type RateBuckets struct{ l *Ledger }

var _ billing.RateBuckets = (*RateBuckets)(nil)

// rateMigrations are the schema "rates", append-only (see sqlitedb.Migrate), migrated by New. full_at is
// Unix nanoseconds UTC; its index serves the sweep.
var rateMigrations = []string{
	`CREATE TABLE rate_buckets (
		key     TEXT    PRIMARY KEY,
		full_at INTEGER NOT NULL
	);
	CREATE INDEX rate_buckets_by_full_at ON rate_buckets (full_at)`,
}

// RateBuckets returns the ledger's shared rate buckets (their table was migrated by New; no I/O). They
// share its database (closed by Ledger.Close) and clock.
func (l *Ledger) RateBuckets() *RateBuckets { return &RateBuckets{l: l} }

// sweepOneIn is how rarely (one take in this many) a take also deletes the buckets that are full again.
const sweepOneIn = 64

// TakeAll is one immediate transaction (billing.RateBuckets): it reads each bucket's "full again at"
// time, decides every take with billing.GCRA and writes the new times only if all were allowed. A full
// bucket is the same as no row, so now and then a take deletes the rows that are full again.
func (r *RateBuckets) TakeAll(ctx context.Context, takes []billing.RateTake) (bool, time.Duration, error) {
	if err := billing.ValidateTakes(takes); err != nil {
		return false, 0, err
	}
	takes = billing.Limited(takes)
	if len(takes) == 0 {
		return true, 0, nil // nothing to read or write
	}
	var (
		ok    bool
		retry time.Duration
	)
	err := r.l.inTx(ctx, func(tx *sql.Tx) error {
		now := r.l.now() // read holding the write lock
		ok, retry = true, 0
		next := make([]time.Time, len(takes))
		for i, t := range takes {
			var full time.Time
			var ns int64
			switch err := tx.QueryRowContext(ctx, `SELECT full_at FROM rate_buckets WHERE key = ?`, t.Key).Scan(&ns); {
			case err == nil:
				full = time.Unix(0, ns)
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("read bucket: %w", err)
			}
			n, allowed, wait := billing.GCRA(full, now, t)
			if !allowed {
				ok, retry = false, max(retry, wait)
			}
			next[i] = n
		}
		if !ok {
			return nil
		}
		for i, t := range takes {
			if next[i].IsZero() {
				continue // unlimited
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO rate_buckets (key, full_at) VALUES (?, ?)
				ON CONFLICT (key) DO UPDATE SET full_at = excluded.full_at`, t.Key, next[i].UnixNano()); err != nil {
				return fmt.Errorf("write bucket: %w", err)
			}
		}
		if rand.IntN(sweepOneIn) == 0 {
			// Bounded, and only buckets full for a minute (those in use trail the clock by an interval).
			if _, err := tx.ExecContext(ctx, `DELETE FROM rate_buckets WHERE key IN
				(SELECT key FROM rate_buckets WHERE full_at <= ? LIMIT 1000)`, now.Add(-time.Minute).UnixNano()); err != nil {
				return fmt.Errorf("sweep full buckets: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("take rate tokens: %w", billing.ClassifyStore(err, nil))
	}
	return ok, retry, nil
}
