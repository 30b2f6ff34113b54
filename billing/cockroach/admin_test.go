package cockroach_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/admintest"
	"github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/testenv"
)

var _ billing.AdminStore = (*cockroach.Ledger)(nil)

func TestAdminContract(t *testing.T) {
	skipShort(t)
	admintest.Run(t, func(t *testing.T) admintest.Store { return open(t, testenv.PostgreSQL(t), cockroach.Config{}) })
}

// Two ledgers, each with a pool of its own, on one database stand for two billing API replicas: of the
// platform team's writes naming one revision, exactly one wins, in every round.
func TestAdminQuotaRaceTwoProcesses(t *testing.T) {
	dsn := testenv.PostgreSQL(t)
	admintest.QuotaRace(t, open(t, dsn, cockroach.Config{}), open(t, dsn, cockroach.Config{}))
}

// Issuers are stamped by the ledger's clock, to the second (as billing/sqlite stamps them), in UTC; event
// times are stored in UTC to the nanosecond, split into microseconds (at) and the rest (at_nanos).
func TestAdminStoredForm(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgreSQL(t)
	now := time.Date(2031, 1, 2, 3, 4, 5, 600, time.FixedZone("UTC+5", 5*3600))
	l := open(t, dsn, cockroach.Config{Now: func() time.Time { return now }})
	iss := admintest.MustPutIssuer(t, l, "acme", "")
	if want := now.Truncate(time.Second); !iss.Created.Equal(want) || iss.Created.Location() != time.UTC {
		t.Fatalf("created %v, want %v in UTC", iss.Created, want)
	}
	if got, err := l.GetIssuer(ctx, "acme"); err != nil || !got.Created.Equal(iss.Created) {
		t.Fatalf("GetIssuer created %v, %v; want %v", got.Created, err, iss.Created)
	}

	at := time.Date(2030, 3, 4, 23, 59, 59, 123_456_789, time.FixedZone("UTC-8", -8*3600))
	ev := billing.UsageEvent{Key: "k", Account: billing.Account{Issuer: "acme", User: "u", Window: billing.Lifetime},
		Kind: billing.KindAI, Model: "m", AIMicros: 1, At: at}
	if err := l.Record(ctx, ev); err != nil {
		t.Fatal(err)
	}
	var (
		stored time.Time
		nanos  int64
	)
	if err := openPool(t, dsn).QueryRow(ctx, `SELECT at, at_nanos FROM usage_events WHERE key = 'k'`).Scan(&stored, &nanos); err != nil {
		t.Fatal(err)
	}
	if want := at.Add(-789); !stored.Equal(want) || nanos != 789 {
		t.Fatalf("at, at_nanos = %v, %d; want %v, 789", stored, nanos, want)
	}
	// The day is the UTC date: 07:59:59 on the 5th.
	f := billing.UsageFilter{From: at, To: at.Add(time.Nanosecond), GroupBy: billing.GroupByDay, Limit: 10}
	page := admintest.MustQuery(t, l, f)
	if want := []billing.UsageRow{{Issuer: "acme", Key: "2030-03-05", AIMicros: 1, Events: 1}}; !reflect.DeepEqual(page.Rows, want) {
		t.Fatalf("the event's own nanosecond: %+v, want %+v", page.Rows, want)
	}
	for _, r := range [][2]time.Time{{at.Add(-time.Microsecond), at}, {at.Add(time.Nanosecond), at.Add(time.Microsecond)}} {
		f.From, f.To = r[0], r[1]
		if page := admintest.MustQuery(t, l, f); len(page.Rows) != 0 {
			t.Fatalf("[%v, %v) holds no event, got %+v", r[0], r[1], page.Rows)
		}
	}
}

// A database written by a binary from before the billing API gains its tables and the at_nanos column,
// and reports the usage recorded before (stored to the microsecond) exactly.
func TestAdminMigratesOldLedger(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgreSQL(t)
	pool := openPool(t, dsn)
	if err := cockroachdb.Migrate(ctx, pool, "ledger", cockroach.Migrations[:2]); err != nil {
		t.Fatal(err)
	}
	old := admintest.Day0.Add(time.Microsecond)
	if _, err := pool.Exec(ctx, `INSERT INTO usage_events
		(key, issuer, "user", "window", window_start, kind, model, ai_micros, compute_seconds, at)
		VALUES ('old', 'acme', 'alice', 'lifetime', '1970-01-01T00:00:00Z', 'ai', 'opus', 42, 0, $1)`, old); err != nil {
		t.Fatal(err)
	}

	l := open(t, dsn, cockroach.Config{})
	if v, err := cockroachdb.Version(ctx, pool, "ledger"); err != nil || v != int64(len(cockroach.Migrations)) {
		t.Fatalf("ledger schema version %d, %v; want %d", v, err, len(cockroach.Migrations))
	}
	page := admintest.MustQuery(t, l, admintest.Range(billing.GroupByModel))
	if len(page.Rows) != 1 || page.Rows[0] != (billing.UsageRow{Issuer: "acme", Key: "opus", AIMicros: 42, Events: 1}) {
		t.Fatalf("usage recorded before the migration: %+v", page.Rows)
	}
	f := admintest.Range(billing.GroupByModel)
	f.From = old.Add(time.Nanosecond)
	if page := admintest.MustQuery(t, l, f); len(page.Rows) != 0 {
		t.Fatalf("an old event counted after its own time: %+v", page.Rows)
	}
	admintest.MustPutIssuer(t, l, "acme", "")
}

// A database whose quotas were written before the admission fields keeps them, and reads the new fields
// as 0 (not set), so the edge keeps its defaults; the new fields are then writable.
func TestAdminMigratesQuotasToAdmissionFields(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgreSQL(t)
	pool := openPool(t, dsn)
	const before = 6 // the steps up to the by-user index, the last before the admission fields
	if err := cockroachdb.Migrate(ctx, pool, "ledger", cockroach.Migrations[:before]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO issuers (id, name, created) VALUES ('acme', 'Acme', '2030-01-01T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO quotas (issuer, "user", ai_micros, compute_seconds, "window", max_sessions, revision)
		VALUES ('acme', '', 5, 60, 'day', 3, 2), ('acme', 'alice', -1, -1, 'lifetime', 1, 1)`); err != nil {
		t.Fatal(err)
	}

	l := open(t, dsn, cockroach.Config{})
	if v, err := cockroachdb.Version(ctx, pool, "ledger"); err != nil || v != int64(len(cockroach.Migrations)) {
		t.Fatalf("ledger schema version %d, %v; want %d", v, err, len(cockroach.Migrations))
	}
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

// A database whose quotas were written with the first admission fields keeps them, and reads the
// issuer-wide prompt rate added after them as 0 (not set).
func TestAdminMigratesQuotasToIssuerPrompts(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgreSQL(t)
	pool := openPool(t, dsn)
	const before = 10 // the steps up to the first admission fields
	if err := cockroachdb.Migrate(ctx, pool, "ledger", cockroach.Migrations[:before]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO issuers (id, name, created) VALUES ('acme', 'Acme', '2030-01-01T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO quotas (issuer, "user", ai_micros, compute_seconds, "window", max_sessions, revision,
			max_issuer_sessions, connects_per_minute, issuer_connects_per_minute, prompts_per_minute)
		VALUES ('acme', '', 5, 60, 'day', 3, 2, 10, 30, 600, 7)`); err != nil {
		t.Fatal(err)
	}

	l := open(t, dsn, cockroach.Config{})
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

// A database whose quotas were written with the issuer-wide prompt rate keeps them, and reads the sandbox
// limits added after it as 0 (not set), so runners keep their defaults; the limits are then writable, also
// on a user's override.
func TestAdminMigratesQuotasToSandboxLimits(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgreSQL(t)
	pool := openPool(t, dsn)
	const before = 11 // the steps up to the issuer-wide prompt rate
	if err := cockroachdb.Migrate(ctx, pool, "ledger", cockroach.Migrations[:before]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO issuers (id, name, created) VALUES ('acme', 'Acme', '2030-01-01T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO quotas (issuer, "user", ai_micros, compute_seconds, "window", max_sessions, revision,
			max_issuer_sessions, connects_per_minute, issuer_connects_per_minute, prompts_per_minute, issuer_prompts_per_minute)
		VALUES ('acme', '', 5, 60, 'day', 3, 2, 10, 30, 600, 7, 70), ('acme', 'alice', -1, -1, 'lifetime', 1, 1, 0, 0, 0, 0, 0)`); err != nil {
		t.Fatal(err)
	}

	l := open(t, dsn, cockroach.Config{})
	if v, err := cockroachdb.Version(ctx, pool, "ledger"); err != nil || v != int64(len(cockroach.Migrations)) {
		t.Fatalf("ledger schema version %d, %v; want %d", v, err, len(cockroach.Migrations))
	}
	admintest.SandboxLimitsMigrated(t, l)
}

// While the database is down every admin call fails with ErrUnavailable (bad input still with ErrInvalid);
// once it is back the same ledger answers again, with nothing lost.
func TestAdminServerDownThenBack(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartPostgreSQL(t)
	l := open(t, srv.CreateDatabase(t), cockroach.Config{})
	admintest.MustPutIssuer(t, l, "acme", "Acme")
	k := billing.QuotaKey{Issuer: "acme"}
	q1 := admintest.MustPutQuota(t, l, k, admintest.Quota(10), 0)
	price := billing.Price{Input: 1, Output: 2}
	if err := l.PutPrice(ctx, "m", price); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, billing.UsageEvent{Key: "before", Account: billing.Account{Issuer: "acme", User: "u", Window: billing.Lifetime},
		Kind: billing.KindAI, Model: "m", AIMicros: 5, At: admintest.Day0}); err != nil {
		t.Fatal(err)
	}

	srv.Stop(t)
	assertAdminUnavailable(t, l)
	invalid := map[string]error{}
	_, invalid["PutIssuer"] = l.PutIssuer(ctx, "", "")
	_, invalid["PutQuota"] = l.PutQuota(ctx, k, billing.Quota{}, 1)
	invalid["PutPrice"] = l.PutPrice(ctx, "m", billing.Price{Input: -1})
	_, invalid["QueryUsage"] = l.QueryUsage(ctx, billing.UsageFilter{})
	for op, err := range invalid {
		if !errors.Is(err, billing.ErrInvalid) || errors.Is(err, billing.ErrUnavailable) {
			t.Errorf("%s with bad input while down: %v, want ErrInvalid", op, err)
		}
	}

	srv.Start(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := l.GetIssuer(ctx, "acme")
		if err == nil {
			break
		}
		if !errors.Is(err, billing.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("GetIssuer after restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := admintest.MustGetQuota(t, l, k); got != q1 {
		t.Fatalf("quota after restart %+v, want %+v", got, q1)
	}
	admintest.MustPutQuota(t, l, k, admintest.Quota(20), q1.Revision)
	if got, err := l.GetPrice(ctx, "m"); err != nil || got != price {
		t.Fatalf("price after restart %+v, %v", got, err)
	}
	page := admintest.MustQuery(t, l, admintest.Range(billing.GroupByUser))
	if want := []billing.UsageRow{{Issuer: "acme", Key: "u", AIMicros: 5, Events: 1}}; !reflect.DeepEqual(page.Rows, want) {
		t.Fatalf("usage after restart %+v, want %+v", page.Rows, want)
	}
}

// A ledger whose pool is closed answers ErrUnavailable to every admin call.
func TestAdminClosedPoolIsUnavailable(t *testing.T) {
	ctx := context.Background()
	pool, err := cockroachdb.Open(ctx, testenv.PostgreSQL(t))
	if err != nil {
		t.Fatal(err)
	}
	l, err := cockroach.New(ctx, cockroach.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	assertAdminUnavailable(t, l)
}

// assertAdminUnavailable checks that every admin method fails with ErrUnavailable, and with nothing that
// would tell the caller its request was wrong.
func assertAdminUnavailable(t *testing.T, l *cockroach.Ledger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := map[string]error{}
	_, errs["PutIssuer"] = l.PutIssuer(ctx, "acme", "")
	_, errs["GetIssuer"] = l.GetIssuer(ctx, "acme")
	_, errs["ListIssuers"] = l.ListIssuers(ctx)
	_, errs["GetQuota"] = l.GetQuota(ctx, billing.QuotaKey{Issuer: "acme"})
	_, errs["PutQuota"] = l.PutQuota(ctx, billing.QuotaKey{Issuer: "acme"}, admintest.Quota(1), 1)
	_, errs["GetPrice"] = l.GetPrice(ctx, "m")
	errs["PutPrice"] = l.PutPrice(ctx, "m", billing.Price{})
	_, errs["ListPrices"] = l.ListPrices(ctx)
	_, errs["QueryUsage"] = l.QueryUsage(ctx, admintest.Range(billing.GroupByUser))
	for op, err := range errs {
		if !errors.Is(err, billing.ErrUnavailable) || errors.Is(err, billing.ErrNotFound) || errors.Is(err, billing.ErrConflict) {
			t.Errorf("%s: %v, want ErrUnavailable", op, err)
		}
	}
}

// The same events recorded in billing/sqlite and here give the same usage reports: rows, order, totals and
// cursors, for every grouping, random ranges exact to the nanosecond, filters, page sizes and cursors
// between groups. The PostgreSQL database sorts text by an ICU locale (en-US: "alice" before "Bob"), so
// the reports must order names byte by byte, as SQLite does, regardless of the database's collation.
func TestAdminMatchesSQLite(t *testing.T) {
	ctx := context.Background()
	pg := open(t, localeDatabase(t, testenv.PostgreSQL(t)), cockroach.Config{})
	lite, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })

	const seed = 1
	rng := rand.New(rand.NewPCG(seed, seed))
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	issuers := []string{"acme", "Beta", "émile", "zed", "Zed"}
	users := []string{"alice", "Bob", "bob", "Émile", "zoë", "a b", "a", "ab"}
	models := []string{"", "opus", "Sonnet", "haiku-4", "ünicode"}
	day0 := admintest.Day0
	var times []time.Time
	for d := range 4 { // the edges of each day, to the nanosecond
		edge := day0.AddDate(0, 0, d)
		times = append(times, edge.Add(-time.Nanosecond), edge, edge.Add(time.Nanosecond), edge.Add(time.Microsecond-1))
	}
	for i := range 300 {
		at := day0.Add(-12*time.Hour + time.Duration(rng.Int64N(int64(72*time.Hour))))
		if i%5 == 0 {
			at = times[rng.IntN(len(times))]
		}
		ev := billing.UsageEvent{Key: fmt.Sprint(i), Account: billing.Account{Issuer: pick(issuers), User: pick(users), Window: billing.Lifetime},
			Model: pick(models), At: at}
		if ev.Model == "" {
			ev.Kind, ev.ComputeSeconds = billing.KindCompute, rng.Int64N(1000)
		} else {
			ev.Kind, ev.AIMicros = billing.KindAI, rng.Int64N(1_000_000_000_000)
		}
		for _, s := range []billing.Ledger{pg, lite} {
			if err := s.Record(ctx, ev); err != nil {
				t.Fatal(err)
			}
		}
	}

	bound := func() time.Time {
		if rng.IntN(2) == 0 {
			return times[rng.IntN(len(times))].Add(time.Duration(rng.IntN(3) - 1))
		}
		return day0.Add(-13*time.Hour + time.Duration(rng.Int64N(int64(74*time.Hour))))
	}
	var filters []billing.UsageFilter
	for _, g := range []billing.GroupBy{billing.GroupByUser, billing.GroupByDay, billing.GroupByModel} {
		whole := billing.UsageFilter{From: day0.AddDate(0, 0, -1), To: day0.AddDate(0, 0, 3), GroupBy: g, Limit: billing.MaxUsageLimit}
		huge := whole
		huge.From, huge.To = time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)
		empty := whole
		empty.From, empty.To = time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9001, 1, 1, 0, 0, 0, 0, time.UTC)
		filters = append(filters, whole, huge, empty)
		for range 15 {
			f := whole
			if f.From, f.To = bound(), bound(); !f.From.Before(f.To) {
				f.From, f.To = f.To, f.From.Add(time.Nanosecond)
			}
			switch rng.IntN(3) {
			case 1:
				f.Issuer = pick(issuers)
			case 2:
				f.Issuer, f.User = pick(issuers), pick(users)
			}
			f.Limit = 1 + rng.IntN(4)
			filters = append(filters, f)
		}
	}
	for i, f := range filters {
		// Walk the pages, then start again after names that fall between groups.
		starts := []string{""}
		for range 3 {
			key := pick(users)
			switch f.GroupBy {
			case billing.GroupByDay:
				key = bound().Format("2006-01-02")
			case billing.GroupByModel:
				key = pick(models)
			}
			starts = append(starts, billing.CursorAfter(f.GroupBy, billing.UsageRow{Issuer: pick(issuers), Key: key[:rng.IntN(len(key)+1)]}))
		}
		for _, cursor := range starts {
			f.Cursor = cursor
			for page := 0; ; page++ {
				want := admintest.MustQuery(t, lite, f)
				got := admintest.MustQuery(t, pg, f)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("filter %d %+v page %d:\n got %+v\nwant %+v (SQLite)", i, f, page, got, want)
				}
				if got.NextCursor == "" {
					break
				}
				f.Cursor = got.NextCursor
			}
		}
	}
	// The issuers list is ordered byte by byte too.
	for _, id := range issuers {
		admintest.MustPutIssuer(t, pg, id, "")
		admintest.MustPutIssuer(t, lite, id, "")
	}
	ids := func(s billing.Issuers) []string {
		list, err := s.ListIssuers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, iss := range list {
			out = append(out, iss.ID)
		}
		return out
	}
	if got, want := ids(pg), ids(lite); !reflect.DeepEqual(got, want) {
		t.Fatalf("ListIssuers order %q, want %q (SQLite)", got, want)
	}
}

// localeDatabase creates, beside the database of dsn, a database whose text sorts by the ICU locale en-US,
// drops it when t ends, and returns its DSN.
func localeDatabase(t *testing.T, dsn string) string {
	t.Helper()
	ctx := context.Background()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%.55s_icu", u.Path[1:]) // unique by testenv's numbered prefix; at most 63 bytes
	admin := openPool(t, dsn)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()+
		` TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'`); err != nil {
		t.Fatalf("create a database collated by en-US: %v", err)
	}
	t.Cleanup(func() { // after the pools of the database closed (registered later, run earlier)
		if _, err := admin.Exec(ctx, `DROP DATABASE `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	locale := u.String()
	var first string
	if err := openPool(t, locale).QueryRow(ctx, `SELECT min(n) FROM (VALUES ('Bob'), ('alice')) AS v (n)`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if first != "alice" {
		t.Fatalf("the en-US database sorts %q first, want alice: not a locale that differs from byte order", first)
	}
	return locale
}
