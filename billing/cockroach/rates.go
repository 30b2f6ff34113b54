package cockroach

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/cockroachdb"
)

// rateMigrations are the schema "rates", append-only (see cockroachdb.Migrate), migrated by
// Ledger.RateBuckets so that a ledger that never limits rates keeps its schema as it is. Keys are bytes
// (the edge's keys join issuer and user with a NUL, which TEXT cannot hold); full_at is Unix nanoseconds
// UTC (exact, where TIMESTAMPTZ keeps microseconds); its index serves the sweep.
var rateMigrations = []string{
	`CREATE TABLE rate_buckets (
		key     BYTEA PRIMARY KEY,
		full_at INT8  NOT NULL
	);
	CREATE INDEX rate_buckets_by_full_at ON rate_buckets (full_at)`,
}

// RateBuckets is billing.RateBuckets on a Ledger's pool and clock.
type RateBuckets struct{ l *Ledger }

var _ billing.RateBuckets = (*RateBuckets)(nil)

// RateBuckets returns the ledger's shared rate buckets, creating or migrating their table if needed
// (several processes may do so at once). They share the ledger's pool and clock.
func (l *Ledger) RateBuckets(ctx context.Context) (*RateBuckets, error) {
	if err := cockroachdb.Migrate(ctx, l.pool, "rates", rateMigrations); err != nil {
		return nil, fmt.Errorf("open rate buckets: %w", err)
	}
	return &RateBuckets{l: l}, nil
}

// sweepOneIn is how rarely (one take in this many) a take also deletes some buckets that are full again.
const sweepOneIn = 64

// TakeAll is one serializable transaction (billing.RateBuckets): it reads each bucket's "full again at"
// time with a locking read, decides every take with billing.GCRA and writes the new times only if all
// were allowed. A full bucket is the same as no row, so now and then a take deletes rows that are full
// again. A take is not idempotent, so an ambiguous commit is an error (ErrUnavailable) rather than run
// twice.
func (r *RateBuckets) TakeAll(ctx context.Context, takes []billing.RateTake) (bool, time.Duration, error) {
	if err := billing.ValidateTakes(takes); err != nil {
		return false, 0, err
	}
	takes = billing.Limited(takes)
	if len(takes) == 0 {
		return true, 0, nil // nothing to read or write
	}
	keys := make([][]byte, len(takes))
	for i, t := range takes {
		keys[i] = []byte(t.Key)
	}
	var (
		ok    bool
		retry time.Duration
	)
	err := r.l.tx(ctx, cockroachdb.TxOptions{}, func(tx pgx.Tx) error {
		now := r.l.now()
		ok, retry = true, 0
		rows, err := tx.Query(ctx, `SELECT key, full_at FROM rate_buckets WHERE key = ANY($1) FOR UPDATE`, keys)
		if err != nil {
			return fmt.Errorf("read buckets: %w", err)
		}
		full := make(map[string]time.Time, len(takes))
		for rows.Next() {
			var k []byte
			var ns int64
			if err := rows.Scan(&k, &ns); err != nil {
				rows.Close()
				return fmt.Errorf("read buckets: %w", err)
			}
			full[string(k)] = time.Unix(0, ns)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read buckets: %w", err)
		}
		next := make([]time.Time, len(takes))
		for i, t := range takes {
			n, allowed, wait := billing.GCRA(full[t.Key], now, t)
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
			if _, err := tx.Exec(ctx, `INSERT INTO rate_buckets (key, full_at) VALUES ($1, $2)
				ON CONFLICT (key) DO UPDATE SET full_at = excluded.full_at`, []byte(t.Key), next[i].UnixNano()); err != nil {
				return fmt.Errorf("write bucket: %w", err)
			}
		}
		if rand.IntN(sweepOneIn) == 0 {
			// Bounded, so a sweep never turns a take into a long transaction.
			if _, err := tx.Exec(ctx, `DELETE FROM rate_buckets WHERE key IN
				(SELECT key FROM rate_buckets WHERE full_at <= $1 LIMIT 1000)`, now.UnixNano()); err != nil {
				return fmt.Errorf("sweep full buckets: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("take rate tokens: %w: %w", billing.ErrUnavailable, err)
	}
	return ok, retry, nil
}
