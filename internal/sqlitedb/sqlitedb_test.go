package sqlitedb_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/warren-mesh/warren/internal/sqlitedb"
)

func open(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sqlitedb.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestOpenSettings(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "w.db"))
	ctx := context.Background()
	for _, tc := range []struct {
		pragma string
		want   string
	}{
		{"journal_mode", "wal"},
		{"foreign_keys", "1"},
		{"synchronous", "1"}, // NORMAL
		{"busy_timeout", "5000"},
	} {
		t.Run(tc.pragma, func(t *testing.T) {
			var got string
			if err := db.QueryRowContext(ctx, "PRAGMA "+tc.pragma).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("PRAGMA %s = %q, want %q", tc.pragma, got, tc.want)
			}
		})
	}
}

func TestOpenRejects(t *testing.T) {
	for _, path := range []string{"", ":memory:", "file:x.db", "x.db?mode=ro"} {
		t.Run(path, func(t *testing.T) {
			if db, err := sqlitedb.Open(context.Background(), path); err == nil {
				db.Close()
				t.Fatalf("Open(%q) succeeded", path)
			}
		})
	}
}

func TestMigrate(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	db := open(t, path)
	steps := []string{
		`CREATE TABLE a (x INTEGER); CREATE TABLE b (y INTEGER)`,
		`ALTER TABLE a ADD COLUMN z TEXT`,
	}
	if err := sqlitedb.Migrate(ctx, db, "test", steps); err != nil {
		t.Fatal(err)
	}
	// Idempotent: a second run applies nothing (the ALTER would fail if rerun).
	if err := sqlitedb.Migrate(ctx, db, "test", steps); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	assertVersion(t, db, "test", 2)
	assertVersion(t, db, "other", 0)
	if _, err := db.ExecContext(ctx, `INSERT INTO a (x, z) VALUES (1, 'z'); INSERT INTO b (y) VALUES (2)`); err != nil {
		t.Fatal(err)
	}

	// A new step is applied on top.
	steps = append(steps, `CREATE TABLE c (w INTEGER)`)
	if err := sqlitedb.Migrate(ctx, db, "test", steps); err != nil {
		t.Fatal(err)
	}
	assertVersion(t, db, "test", 3)

	// Names are independent.
	if err := sqlitedb.Migrate(ctx, db, "other", []string{`CREATE TABLE d (v INTEGER)`}); err != nil {
		t.Fatal(err)
	}
	assertVersion(t, db, "other", 1)

	// An older binary refuses a newer schema.
	if err := sqlitedb.Migrate(ctx, db, "test", steps[:1]); !errors.Is(err, sqlitedb.ErrSchemaTooNew) {
		t.Fatalf("migrate with fewer steps: %v, want ErrSchemaTooNew", err)
	}
}

func TestMigrateFailedStepRollsBack(t *testing.T) {
	ctx := context.Background()
	db := open(t, filepath.Join(t.TempDir(), "m.db"))
	steps := []string{
		`CREATE TABLE a (x INTEGER)`,
		`CREATE TABLE b (y INTEGER); THIS IS NOT SQL`,
	}
	if err := sqlitedb.Migrate(ctx, db, "test", steps); err == nil {
		t.Fatal("migrate with a broken step succeeded")
	}
	assertVersion(t, db, "test", 1)
	if _, err := db.ExecContext(ctx, `SELECT * FROM b`); err == nil {
		t.Fatal("table b of the failed step exists")
	}
}

// Several processes starting at once on one file apply every step exactly once.
func TestMigrateConcurrent(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	steps := []string{`CREATE TABLE a (x INTEGER)`, `ALTER TABLE a ADD COLUMN y INTEGER`}
	var dbs []*sql.DB
	for range 4 {
		dbs = append(dbs, open(t, path))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(dbs))
	for i, db := range dbs {
		wg.Go(func() { errs[i] = sqlitedb.Migrate(ctx, db, "test", steps) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrate %d: %v", i, err)
		}
	}
	assertVersion(t, dbs[0], "test", 2)
}

func assertVersion(t testing.TB, db *sql.DB, name string, want int64) {
	t.Helper()
	got, err := sqlitedb.Version(context.Background(), db, name)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("version of %s = %d, want %d", name, got, want)
	}
}
