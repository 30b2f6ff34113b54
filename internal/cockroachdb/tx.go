package cockroachdb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	crdbpgx "github.com/cockroachdb/cockroach-go/v2/crdb/crdbpgxv5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TxOptions configures ExecuteTx.
type TxOptions struct {
	// ReadOnly declares a transaction that only reads (BEGIN ... READ ONLY): the server refuses writes in it,
	// and PostgreSQL's serializable isolation tracks it more cheaply.
	ReadOnly bool
	// Idempotent says that running fn again after it committed changes nothing (it is keyed by an
	// idempotency key, or a compare-and-set that a second run finds done). ExecuteTx then resolves an
	// ambiguous commit by running fn again in a new transaction, up to twice, and answers what that says.
	Idempotent bool
	// ReadCommitted runs the transaction at READ COMMITTED on PostgreSQL, for statements that are each
	// atomic on their own rows (a conditional UPSERT ... RETURNING) and only need row locks: under
	// contention on one row they wait for the lock and re-evaluate instead of failing serialization and
	// retrying. CockroachDB runs it SERIALIZABLE all the same (its READ COMMITTED needs a cluster setting,
	// and it queues writers of one row in its lock table).
	ReadCommitted bool
}

// ambiguousReruns bounds the reruns of an idempotent transaction after ambiguous commits.
const ambiguousReruns = 2

// ExecuteTx runs fn in one SERIALIZABLE transaction (see TxOptions.ReadCommitted) on pool, committing if
// fn returns nil and running it again on serialization failures. fn may be run several times, so it must not have effects outside the
// transaction, and must wrap errors with %w so their SQLSTATE stays visible. Errors of fn come back as fn
// returned them (wrapped at most); database errors are classified by Classify.
//
// On CockroachDB it is crdb.ExecuteTx (crdbpgxv5): the cockroach_restart savepoint protocol, where RELEASE
// commits and a retryable error restarts the transaction in place; a failed RELEASE is reported as
// crdb.AmbiguousCommitError. That protocol is unsound on PostgreSQL: RELEASE there does not commit,
// crdb.ExecuteTx ignores the error of the COMMIT that follows (a serialization failure detected at commit
// would be lost, reported as success), and a retry in place reuses the failed transaction's snapshot. So
// on PostgreSQL each attempt is a transaction of its own, BEGIN to COMMIT, retried with jittered
// exponential backoff on 40001 and 40P01 up to 100 attempts; a COMMIT that fails without the server saying
// why wraps ErrAmbiguousCommit.
func ExecuteTx(ctx context.Context, pool *pgxpool.Pool, srv Server, opts TxOptions, fn func(pgx.Tx) error) error {
	txo := pgx.TxOptions{IsoLevel: pgx.Serializable}
	if opts.ReadCommitted && srv != CockroachDB {
		txo.IsoLevel = pgx.ReadCommitted
	}
	if opts.ReadOnly {
		txo.AccessMode = pgx.ReadOnly
	}
	run := func() error {
		if srv == CockroachDB {
			return crdbpgx.ExecuteTx(ctx, pool, txo, fn)
		}
		return executePostgres(ctx, pool, txo, fn)
	}
	err := run()
	for i := 0; opts.Idempotent && i < ambiguousReruns && Classify(err) == Ambiguous && ctx.Err() == nil; i++ {
		err = run()
	}
	return err
}

// Retries on PostgreSQL: the k-th retry waits a random time in [d/2, d], d = min(maxBackoff, minBackoff·2^k).
const (
	maxAttempts = 100
	minBackoff  = 500 * time.Microsecond
	maxBackoff  = 50 * time.Millisecond
)

func executePostgres(ctx context.Context, pool *pgxpool.Pool, txo pgx.TxOptions, fn func(pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := attemptTx(ctx, pool, txo, fn)
		if err == nil || Classify(err) != Retryable {
			return err
		}
		if attempt == maxAttempts {
			return fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		d := min(maxBackoff, minBackoff<<min(attempt-1, 16))
		t := time.NewTimer(d/2 + rand.N(d/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (retrying after: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

func attemptTx(ctx context.Context, pool *pgxpool.Pool, txo pgx.TxOptions, fn func(pgx.Tx) error) error {
	tx, err := pool.BeginTx(ctx, txo)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) // a no-op after Commit; after a panic in fn it returns the connection clean
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		var pgErr *pgconn.PgError
		// Only the server's own answer says the transaction did not commit. (pgconn.SafeToRetry is no
		// guide here: a connection lost while reading the COMMIT's answer reports "conn closed", which
		// claims to be safe to retry.)
		if errors.As(err, &pgErr) || errors.Is(err, pgx.ErrTxCommitRollback) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrAmbiguousCommit, err)
	}
	return nil
}
