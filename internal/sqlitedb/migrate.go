package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrSchemaTooNew: the database was migrated by a newer binary that knows more steps than this one.
var ErrSchemaTooNew = errors.New("database schema newer than this binary")

// Migrate brings the schema called name up to len(steps). Step i (0-based) is version i+1; the versions
// applied so far are kept in schema_migrations(name, version), so several adapters can share one file. Each
// step runs in its own immediate transaction together with its version bump, so a step is applied exactly
// once even when several processes migrate the same file at the same time. Steps are append-only: never edit
// or reorder a released step, add a new one.
func Migrate(ctx context.Context, db *sql.DB, name string, steps []string) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		name    TEXT PRIMARY KEY,
		version INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("migrate %s: create schema_migrations: %w", name, err)
	}
	for i, step := range steps {
		if err := migrateStep(ctx, db, name, int64(i+1), step); err != nil {
			return err
		}
	}
	// A version beyond the known steps means a newer binary owns this file; running against a schema we
	// do not understand could corrupt it.
	v, err := Version(ctx, db, name)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", name, err)
	}
	if v > int64(len(steps)) {
		return fmt.Errorf("migrate %s: at version %d, know %d steps: %w", name, v, len(steps), ErrSchemaTooNew)
	}
	return nil
}

func migrateStep(ctx context.Context, db *sql.DB, name string, want int64, step string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate %s to %d: begin: %w", name, want, err)
	}
	defer tx.Rollback()
	var have int64
	err = tx.QueryRowContext(ctx, `SELECT version FROM schema_migrations WHERE name = ?`, name).Scan(&have)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("migrate %s to %d: read version: %w", name, want, err)
	}
	if have >= want {
		return nil
	}
	if _, err := tx.ExecContext(ctx, step); err != nil {
		return fmt.Errorf("migrate %s to %d: %w", name, want, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (name, version) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET version = excluded.version`, name, want); err != nil {
		return fmt.Errorf("migrate %s to %d: record version: %w", name, want, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate %s to %d: commit: %w", name, want, err)
	}
	return nil
}

// Version reports the schema version of name: 0 when name was never migrated; an error when Migrate never
// ran on db at all.
func Version(ctx context.Context, db *sql.DB, name string) (int64, error) {
	var v int64
	err := db.QueryRowContext(ctx, `SELECT version FROM schema_migrations WHERE name = ?`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read schema version of %s: %w", name, err)
	}
	return v, nil
}
