package cockroachdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrSchemaTooNew: the database was migrated by a newer binary that knows more steps than this one.
var ErrSchemaTooNew = errors.New("database schema newer than this binary")

// migrationsLock is the PostgreSQL advisory lock key that serializes Migrate calls ("warren-m" in ASCII).
const migrationsLock int64 = 0x77617272656e2d6d

const createMigrations = `CREATE TABLE IF NOT EXISTS schema_migrations (
	name       TEXT        NOT NULL,
	version    INT8        NOT NULL,
	applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
	PRIMARY KEY (name, version)
)`

// Migrate brings the schema called name up to len(steps). Step i (0-based) is version i+1; each applied
// version is a row (name, version) of schema_migrations, so several adapters can share one database. A
// step may hold several statements separated by semicolons. Steps are append-only: never edit or reorder a
// released step, add a new one. A database already beyond len(steps) fails with ErrSchemaTooNew: running
// against a schema this binary does not understand could corrupt it.
//
// Several instances may start at once, and each step is applied exactly once:
//   - On PostgreSQL all pending steps run in one READ COMMITTED transaction after taking a
//     transaction-scoped advisory lock (pg_advisory_xact_lock), so migrators queue up behind each other and
//     each reads the versions the one before it committed (READ COMMITTED, because a serializable snapshot
//     would be taken before the wait and miss them). DDL is transactional there: a failed step leaves
//     nothing behind.
//   - CockroachDB has no advisory locks. Each step runs in a serializable transaction (ExecuteTx) that reads
//     the version, applies the step and inserts its (name, version) row: of two instances applying the same
//     step, one commits and the other fails on the serializable read or on the primary key, is rolled back
//     with its DDL, and on its next attempt finds the step applied.
//
// Statements that only CockroachDB understands (table localities, row-level TTL) go into a schema of their
// own, migrated only when Detect reports CockroachDB (see billing/cockroach for an example).
func Migrate(ctx context.Context, pool *pgxpool.Pool, name string, steps []string) error {
	srv, err := Detect(ctx, pool)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", name, err)
	}
	if srv == CockroachDB {
		err = migrateCockroach(ctx, pool, name, steps)
	} else {
		err = migratePostgres(ctx, pool, name, steps)
	}
	if err != nil {
		return fmt.Errorf("migrate %s: %w", name, err)
	}
	return nil
}

func migratePostgres(ctx context.Context, pool *pgxpool.Pool, name string, steps []string) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationsLock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if _, err := tx.Exec(ctx, createMigrations); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		have, err := version(ctx, tx, name)
		if err != nil {
			return err
		}
		if have > int64(len(steps)) {
			return fmt.Errorf("at version %d, know %d steps: %w", have, len(steps), ErrSchemaTooNew)
		}
		for v := have + 1; v <= int64(len(steps)); v++ {
			if err := applyStep(ctx, tx, name, v, steps[v-1]); err != nil {
				return err
			}
		}
		return nil
	})
}

func migrateCockroach(ctx context.Context, pool *pgxpool.Pool, name string, steps []string) error {
	if err := ExecuteTx(ctx, pool, CockroachDB, TxOptions{}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, createMigrations)
		return err
	}); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	for i, step := range steps {
		v := int64(i + 1)
		for attempt := 1; ; attempt++ {
			err := ExecuteTx(ctx, pool, CockroachDB, TxOptions{}, func(tx pgx.Tx) error {
				have, err := version(ctx, tx, name)
				if err != nil || have >= v {
					return err
				}
				return applyStep(ctx, tx, name, v, step)
			})
			if err == nil {
				break
			}
			// Another instance inserted the version between our read and our insert: read again.
			if Classify(err) != Conflict || attempt == 3 {
				return err
			}
		}
	}
	have, err := Version(ctx, pool, name)
	if err != nil {
		return err
	}
	if have > int64(len(steps)) {
		return fmt.Errorf("at version %d, know %d steps: %w", have, len(steps), ErrSchemaTooNew)
	}
	return nil
}

func applyStep(ctx context.Context, tx pgx.Tx, name string, v int64, step string) error {
	// No arguments: pgx sends the step over the simple query protocol, which allows several statements.
	if _, err := tx.Exec(ctx, step); err != nil {
		return fmt.Errorf("step %d: %w", v, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (name, version) VALUES ($1, $2)`, name, v); err != nil {
		return fmt.Errorf("step %d: record version: %w", v, err)
	}
	return nil
}

// Version reports the schema version of name: 0 when name was never migrated; an error when Migrate never
// ran on the database at all.
func Version(ctx context.Context, pool *pgxpool.Pool, name string) (int64, error) {
	return version(ctx, pool, name)
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func version(ctx context.Context, q queryRower, name string) (int64, error) {
	var v int64
	if err := q.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM schema_migrations WHERE name = $1`, name).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version of %s: %w", name, err)
	}
	return v, nil
}
