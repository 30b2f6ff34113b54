package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/sessiontest"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/sqlitedb"
)

// New migrates every schema the ledger's handles use, so Sessions and RateBuckets of a ledger on a fresh
// file work at once, with no migration of their own (they take no context and do no I/O).
func TestNewMigratesHandles(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := open(t, sqlite.Config{Path: path})
	db, err := sqlitedb.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range []struct {
		name  string
		steps []string
	}{{"ledger", sqlite.Migrations}, {"rates", sqlite.RateMigrations}} {
		if v, err := sqlitedb.Version(ctx, db, s.name); err != nil || v != int64(len(s.steps)) {
			t.Fatalf("after New, schema %q is at version %d (%v); want %d", s.name, v, err, len(s.steps))
		}
	}
	sessiontest.Acquire(t, l.Sessions(), sessiontest.Lease("s1", "iss", "alice"), 1, 1)
	if err := l.Sessions().Release(ctx, "s1"); err != nil {
		t.Fatalf("release from a second handle: %v", err)
	}
	ok, _, err := l.RateBuckets().TakeAll(ctx, []billing.RateTake{{Key: "iss\x00alice", PerMinute: 1, Burst: 1}})
	if err != nil || !ok {
		t.Fatalf("take from a fresh ledger's buckets = %v, %v; want allowed", ok, err)
	}
}
