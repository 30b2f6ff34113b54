package cockroach

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/cockroachdb"
)

// rateMigrations are the schema "rates", append-only (see cockroachdb.Migrate), migrated by New. Keys are
// bytes (the edge's keys join issuer and user with a NUL, which TEXT cannot hold); full_at is Unix
// nanoseconds UTC (exact, where TIMESTAMPTZ keeps microseconds); its index serves the sweep.
var rateMigrations = []string{
	`CREATE TABLE rate_buckets (
		key     BYTEA PRIMARY KEY,
		full_at INT8  NOT NULL
	);
	CREATE INDEX rate_buckets_by_full_at ON rate_buckets (full_at)`,
}

// rateMultiRegionMigrations run only on a multi-region CockroachDB database, as the schema
// "rates-multiregion" (see multiRegionMigrations): a bucket is homed in the region that first took from it,
// where its user's edge is, so a user's takes stay in the region; an issuer's bucket is homed where that
// issuer was first seen, and takes from other regions pay the round trip to it.
var rateMultiRegionMigrations = []string{
	`ALTER TABLE rate_buckets SET LOCALITY REGIONAL BY ROW`,
}

// RateBuckets is billing.RateBuckets on a Ledger's pool and clock.
type RateBuckets struct{ l *Ledger }

var _ billing.RateBuckets = (*RateBuckets)(nil)

// RateBuckets returns the ledger's shared rate buckets (their table was migrated by New; no I/O). They
// share the ledger's pool and clock.
func (l *Ledger) RateBuckets() *RateBuckets { return &RateBuckets{l: l} }

// sweepOneIn is how rarely (one take in this many) a take also deletes some buckets that are full again.
const sweepOneIn = 64

// TakeAll takes from each bucket with one conditional UPSERT (billing.GCRA in SQL: the bucket's new "full
// again at" is max(full_at, now) + interval, written only if that is at most burst intervals ahead), in
// key order, in one transaction that is rolled back as soon as a bucket refuses, so a refusal takes
// nothing. Each statement is atomic on its row, so the transaction needs no more than READ COMMITTED on
// PostgreSQL (TxOptions.ReadCommitted): takers of one hot bucket (an issuer's) queue on its row lock
// instead of failing serialization. One take in sweepOneIn then sweeps. A take is not idempotent, so an ambiguous commit is an error
// (ErrUnavailable) rather than run twice.
func (r *RateBuckets) TakeAll(ctx context.Context, takes []billing.RateTake) (bool, time.Duration, error) {
	if err := billing.ValidateTakes(takes); err != nil {
		return false, 0, err
	}
	takes = billing.Limited(takes)
	if len(takes) == 0 {
		return true, 0, nil // nothing to read or write
	}
	for _, t := range takes {
		if t.PerMinute == 0 {
			return false, time.Minute, nil // nothing ever lets it through (billing.GCRA)
		}
	}
	// One lock order for every taker, so two takes of the same buckets cannot deadlock: descending by key,
	// which puts a user's bucket (".../user/...") before its issuer's (".../issuer/..."), so a take the
	// user's bucket refuses never locks the issuer's hot row, and the issuer's is held the shortest.
	takes = slices.Clone(takes)
	slices.SortFunc(takes, func(a, b billing.RateTake) int { return strings.Compare(b.Key, a.Key) })
	var (
		ok    bool
		retry time.Duration
	)
	errRefused := errors.New("refused")
	err := r.l.tx(ctx, cockroachdb.TxOptions{ReadCommitted: true}, func(tx pgx.Tx) error {
		now := r.l.now().UnixNano()
		ok, retry = true, 0
		for _, t := range takes {
			interval, tolerance, limited := gcraParams(t)
			if !limited {
				continue
			}
			var full int64
			err := tx.QueryRow(ctx, `INSERT INTO rate_buckets AS b (key, full_at) VALUES ($1, $2::INT8 + $3::INT8)
				ON CONFLICT (key) DO UPDATE SET full_at = GREATEST(b.full_at, $2::INT8) + $3::INT8
				WHERE GREATEST(b.full_at, $2::INT8) + $3::INT8 - $2::INT8 <= $4::INT8
				RETURNING full_at`, []byte(t.Key), now, interval, tolerance).Scan(&full)
			if errors.Is(err, pgx.ErrNoRows) {
				// Refused: how long until the bucket has a token, from what it holds now.
				switch err := tx.QueryRow(ctx, `SELECT full_at FROM rate_buckets WHERE key = $1`, []byte(t.Key)).Scan(&full); {
				case errors.Is(err, pgx.ErrNoRows):
					full = now // swept meanwhile: full again, worth trying at once
				case err != nil:
					return fmt.Errorf("read bucket: %w", err)
				}
				ok, retry = false, max(time.Duration(max(full, now)+interval-now-tolerance), time.Millisecond)
				return errRefused // roll back what earlier buckets took
			}
			if err != nil {
				return fmt.Errorf("take from bucket: %w", err)
			}
		}
		return nil
	})
	if err == nil && rand.IntN(sweepOneIn) == 0 {
		r.sweep(ctx)
	}
	if errors.Is(err, errRefused) {
		return false, retry, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("take rate tokens: %w", billing.ClassifyStore(err, nil))
	}
	return ok, retry, nil
}

// sweepGrace keeps a bucket that is full again for this long before a sweep deletes it, so the buckets
// in use (whose "full again" trails the clock by an interval) are not deleted and re-inserted all the time.
const sweepGrace = time.Minute

// sweep deletes up to 1000 buckets that have been full for sweepGrace (a full bucket is the same as no
// row), in a statement of its own after the take committed, skipping rows other takers hold. A failure is
// left to the next sweep.
func (r *RateBuckets) sweep(ctx context.Context) {
	before := r.l.now().Add(-sweepGrace).UnixNano()
	_, _ = r.l.pool.Exec(ctx, `DELETE FROM rate_buckets WHERE key IN
		(SELECT key FROM rate_buckets WHERE full_at <= $1 LIMIT 1000 FOR UPDATE SKIP LOCKED)`, before)
}

// gcraParams are billing.GCRAParams in nanoseconds, the tolerance capped so that full_at + interval
// cannot overflow in SQL.
func gcraParams(t billing.RateTake) (interval, tolerance int64, limited bool) {
	iv, tol, limited := billing.GCRAParams(t)
	return int64(iv), min(int64(tol), math.MaxInt64/2), limited
}
