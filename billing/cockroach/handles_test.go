package cockroach_test

import (
	"context"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/billing/sessiontest"
	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/testenv"
)

// New migrates every schema the ledger's handles use, so Sessions and RateBuckets of a ledger on a fresh
// database work at once, with no migration of their own (they take no context and do no I/O).
func TestNewMigratesHandles(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgreSQL(t)
	pool := openPool(t, dsn)
	l, err := cockroach.New(ctx, cockroach.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		name  string
		steps []string
	}{{"ledger", cockroach.Migrations}, {"sessions", cockroach.SessionMigrations}, {"rates", cockroach.RateMigrations}} {
		if v, err := cockroachdb.Version(ctx, pool, s.name); err != nil || v != int64(len(s.steps)) {
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
