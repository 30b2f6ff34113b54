package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/admintest"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/sqlitedb"
)

func TestAdminContract(t *testing.T) {
	admintest.Run(t, func(t *testing.T) admintest.Store {
		return open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	})
}

// A ledger file written by the binary before the billing API gains its tables and keeps its usage.
func TestAdminMigratesOldLedger(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sqlitedb.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlitedb.Migrate(ctx, db, "ledger", sqlite.Migrations[:2]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO usage_events
		(key, issuer, "user", "window", window_start, kind, model, ai_micros, compute_seconds, at)
		VALUES ('old', 'acme', 'alice', 'lifetime', 0, 'ai', 'opus', 42, 0, ?)`, admintest.Day0.UnixNano()); err != nil {
		t.Fatal(err)
	}
	db.Close()

	l := open(t, sqlite.Config{Path: path})
	page := admintest.MustQuery(t, l, admintest.Range(billing.GroupByModel))
	if len(page.Rows) != 1 || page.Rows[0] != (billing.UsageRow{Issuer: "acme", Key: "opus", AIMicros: 42, Events: 1}) {
		t.Fatalf("usage recorded before the migration: %+v", page.Rows)
	}
	admintest.MustPutIssuer(t, l, "acme", "")
}

// A ledger file whose quotas were written before the admission fields keeps them, and reads the new
// fields as 0 (not set), so the edge keeps its defaults; the new fields are then writable.
func TestAdminMigratesQuotasToAdmissionFields(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sqlitedb.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	const before = 5 // the steps up to session leases, the last before the admission fields
	if err := sqlitedb.Migrate(ctx, db, "ledger", sqlite.Migrations[:before]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO issuers (id, name, created) VALUES ('acme', 'Acme', 0);
		INSERT INTO quotas (issuer, "user", ai_micros, compute_seconds, "window", max_sessions, revision)
		VALUES ('acme', '', 5, 60, 'day', 3, 2), ('acme', 'alice', -1, -1, 'lifetime', 1, 1)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	l := open(t, sqlite.Config{Path: path})
	issuer, user := billing.QuotaKey{Issuer: "acme"}, billing.QuotaKey{Issuer: "acme", User: "alice"}
	wantIssuer := billing.Quota{AIMicros: 5, ComputeSeconds: 60, Window: billing.Day, MaxConcurrentSessions: 3, Revision: 2}
	if got := admintest.MustGetQuota(t, l, issuer); got != wantIssuer {
		t.Fatalf("issuer quota after the migration = %+v, want %+v", got, wantIssuer)
	}
	wantUser := billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime, MaxConcurrentSessions: 1, Revision: 1}
	if got := admintest.MustGetQuota(t, l, user); got != wantUser {
		t.Fatalf("user quota after the migration = %+v, want %+v", got, wantUser)
	}
	if iss, err := l.GetIssuer(ctx, "acme"); err != nil || iss.Quota == nil || *iss.Quota != wantIssuer {
		t.Fatalf("GetIssuer after the migration = %+v, %v", iss.Quota, err)
	}
	wantIssuer.MaxIssuerSessions, wantIssuer.PromptsPerMinute, wantIssuer.IssuerPromptsPerMinute = 4, 9, 90
	admintest.MustPutQuota(t, l, issuer, wantIssuer, 2)
}

// A ledger file whose quotas were written with the first admission fields keeps them, and reads the
// issuer-wide prompt rate added after them as 0 (not set).
func TestAdminMigratesQuotasToIssuerPrompts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sqlitedb.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	const before = 6 // the steps up to the first admission fields
	if err := sqlitedb.Migrate(ctx, db, "ledger", sqlite.Migrations[:before]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO issuers (id, name, created) VALUES ('acme', 'Acme', 0);
		INSERT INTO quotas (issuer, "user", ai_micros, compute_seconds, "window", max_sessions, revision,
			max_issuer_sessions, connects_per_minute, issuer_connects_per_minute, prompts_per_minute)
		VALUES ('acme', '', 5, 60, 'day', 3, 2, 10, 30, 600, 7)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	l := open(t, sqlite.Config{Path: path})
	k := billing.QuotaKey{Issuer: "acme"}
	want := billing.Quota{AIMicros: 5, ComputeSeconds: 60, Window: billing.Day, MaxConcurrentSessions: 3, Revision: 2,
		MaxIssuerSessions: 10, ConnectsPerMinute: 30, IssuerConnectsPerMinute: 600, PromptsPerMinute: 7}
	if got := admintest.MustGetQuota(t, l, k); got != want {
		t.Fatalf("quota after the migration = %+v, want %+v", got, want)
	}
	want.IssuerPromptsPerMinute = 70
	if got := admintest.MustPutQuota(t, l, k, want, 2); got.IssuerPromptsPerMinute != 70 {
		t.Fatalf("quota written after the migration = %+v", got)
	}
}

// A ledger file whose quotas were written with the issuer-wide prompt rate keeps them, and reads the
// sandbox limits added after it as 0 (not set), so runners keep their defaults; the limits are then
// writable, also on a user's override.
func TestAdminMigratesQuotasToSandboxLimits(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sqlitedb.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	const before = 7 // the steps up to the issuer-wide prompt rate
	if err := sqlitedb.Migrate(ctx, db, "ledger", sqlite.Migrations[:before]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO issuers (id, name, created) VALUES ('acme', 'Acme', 0);
		INSERT INTO quotas (issuer, "user", ai_micros, compute_seconds, "window", max_sessions, revision,
			max_issuer_sessions, connects_per_minute, issuer_connects_per_minute, prompts_per_minute, issuer_prompts_per_minute)
		VALUES ('acme', '', 5, 60, 'day', 3, 2, 10, 30, 600, 7, 70), ('acme', 'alice', -1, -1, 'lifetime', 1, 1, 0, 0, 0, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	l := open(t, sqlite.Config{Path: path})
	admintest.SandboxLimitsMigrated(t, l)
}

// Issuers are stamped by the ledger's clock, to the second.
func TestIssuerCreatedByClock(t *testing.T) {
	now := time.Date(2031, 1, 2, 3, 4, 5, 600, time.UTC)
	l := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db"), Now: func() time.Time { return now }})
	if iss := admintest.MustPutIssuer(t, l, "acme", ""); !iss.Created.Equal(now.Truncate(time.Second)) {
		t.Fatalf("created %v, want %v", iss.Created, now.Truncate(time.Second))
	}
}

func TestAdminClosedIsUnavailable(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	errs := map[string]error{}
	_, errs["PutIssuer"] = l.PutIssuer(ctx, "acme", "")
	_, errs["GetIssuer"] = l.GetIssuer(ctx, "acme")
	_, errs["ListIssuers"] = l.ListIssuers(ctx)
	_, errs["GetQuota"] = l.GetQuota(ctx, billing.QuotaKey{Issuer: "acme"})
	_, errs["PutQuota"] = l.PutQuota(ctx, billing.QuotaKey{Issuer: "acme"}, admintest.Quota(1), 0)
	_, errs["GetPrice"] = l.GetPrice(ctx, "m")
	errs["PutPrice"] = l.PutPrice(ctx, "m", billing.Price{})
	_, errs["ListPrices"] = l.ListPrices(ctx)
	_, errs["QueryUsage"] = l.QueryUsage(ctx, admintest.Range(billing.GroupByUser))
	for op, err := range errs {
		if !errors.Is(err, billing.ErrUnavailable) {
			t.Errorf("%s on a closed ledger: %v, want ErrUnavailable", op, err)
		}
	}
}
