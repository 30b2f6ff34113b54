// Package cockroach is the production billing.Ledger, billing.Reserver, billing.Sessions and
// billing.AdminStore: usage events, per-window totals, budget holds, session leases, and the billing API's
// issuers, quotas, prices and usage reports in CockroachDB (and in PostgreSQL, its stand-in in tests),
// through pgx.
//
// Every write is one SERIALIZABLE transaction run by cockroachdb.ExecuteTx (crdb.ExecuteTx on
// CockroachDB), retried on serialization failures. A process's concurrent Reserve, Settle, Release and
// Record calls share one such transaction at a time, and its concurrent Usage reads one statement
// (batch.go), so that the process never conflicts with itself. Recording is idempotent by event key (the primary key
// of usage_events) and the totals move in the same transaction as the event insert, so a redelivered event
// is never counted twice; a hold is granted in the same transaction that reads what is used and held, so
// concurrent callers in any number of processes cannot overspend. Because every operation is idempotent, a
// commit whose outcome is unknown (the connection failed during COMMIT) is resolved by running the
// operation again: the idempotency key finds what the first run did.
//
// Times (event times, hold expiries) are values of the Go clock (Config.Now), never now() in SQL, so
// processes and tests agree on what has expired. They are stored in UTC; event times to the nanosecond
// (at and at_nanos), so that usage reports match billing/sqlite's exactly.
package cockroach

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/cockroachdb"
)

// migrations are append-only; see cockroachdb.Migrate. They run on CockroachDB and PostgreSQL alike.
// window_start is the window's start truncated to the second, 1970-01-01 UTC for the lifetime window.
var migrations = []string{
	`CREATE TABLE usage_events (
		key             TEXT        PRIMARY KEY,
		issuer          TEXT        NOT NULL,
		"user"          TEXT        NOT NULL,
		"window"        TEXT        NOT NULL,
		window_start    TIMESTAMPTZ NOT NULL,
		kind            TEXT        NOT NULL,
		model           TEXT        NOT NULL DEFAULT '',
		ai_micros       INT8        NOT NULL CHECK (ai_micros >= 0),
		compute_seconds INT8        NOT NULL CHECK (compute_seconds >= 0),
		at              TIMESTAMPTZ NOT NULL
	);
	CREATE TABLE usage_totals (
		issuer          TEXT        NOT NULL,
		"user"          TEXT        NOT NULL,
		"window"        TEXT        NOT NULL,
		window_start    TIMESTAMPTZ NOT NULL,
		ai_micros       INT8        NOT NULL DEFAULT 0,
		compute_seconds INT8        NOT NULL DEFAULT 0,
		PRIMARY KEY (issuer, "user", "window", window_start)
	)`,
	// Holds (billing.Reserver). The index serves the per-account reads of Reserve and Usage: the sum of the
	// unexpired holds and the sweep of the expired ones.
	`CREATE TABLE holds (
		id           TEXT        PRIMARY KEY,
		issuer       TEXT        NOT NULL,
		"user"       TEXT        NOT NULL,
		"window"     TEXT        NOT NULL,
		window_start TIMESTAMPTZ NOT NULL,
		granted      INT8        NOT NULL CHECK (granted > 0),
		expires_at   TIMESTAMPTZ NOT NULL
	);
	CREATE INDEX holds_by_account ON holds (issuer, "user", "window", window_start, expires_at)`,
	// The billing API's tables (admin.go): issuers, quotas (a quota's "user" is '' for the issuer's
	// default) and price overrides. created is the registration time truncated to the second, as
	// billing/sqlite stores it.
	`CREATE TABLE issuers (
		id      TEXT        PRIMARY KEY,
		name    TEXT        NOT NULL,
		created TIMESTAMPTZ NOT NULL
	);
	CREATE TABLE quotas (
		issuer          TEXT NOT NULL,
		"user"          TEXT NOT NULL,
		ai_micros       INT8 NOT NULL CHECK (ai_micros >= -1),
		compute_seconds INT8 NOT NULL CHECK (compute_seconds >= -1),
		"window"        TEXT NOT NULL,
		max_sessions    INT8 NOT NULL CHECK (max_sessions >= -1),
		revision        INT8 NOT NULL CHECK (revision > 0),
		PRIMARY KEY (issuer, "user")
	);
	CREATE TABLE prices (
		model          TEXT PRIMARY KEY,
		input          INT8 NOT NULL CHECK (input >= 0),
		output         INT8 NOT NULL CHECK (output >= 0),
		cache_read     INT8 NOT NULL CHECK (cache_read >= 0),
		cache_creation INT8 NOT NULL CHECK (cache_creation >= 0)
	)`,
	// TIMESTAMPTZ keeps microseconds; at_nanos keeps the nanoseconds past at's microsecond, so usage
	// reports select events by the nanosecond, as billing/sqlite does. Events recorded before this step
	// were stored to the microsecond, which the default 0 describes exactly. (One DDL statement per step:
	// CockroachDB runs schema changes on existing tables after the commit.)
	`ALTER TABLE usage_events ADD COLUMN at_nanos INT8 NOT NULL DEFAULT 0 CHECK (at_nanos BETWEEN 0 AND 999)`,
	// Usage reports (QueryUsage) select events by time, for every issuer or for one issuer or user.
	`CREATE INDEX usage_events_by_time ON usage_events (at, at_nanos)`,
	`CREATE INDEX usage_events_by_user ON usage_events (issuer, "user", at, at_nanos)`,
	// The quotas' admission fields (billing.Quota): 0 is not set, so quotas written before them keep the
	// edge's defaults; -1 is unlimited. One column per step, as above.
	`ALTER TABLE quotas ADD COLUMN max_issuer_sessions INT8 NOT NULL DEFAULT 0 CHECK (max_issuer_sessions >= -1)`,
	`ALTER TABLE quotas ADD COLUMN connects_per_minute INT8 NOT NULL DEFAULT 0 CHECK (connects_per_minute >= -1)`,
	`ALTER TABLE quotas ADD COLUMN issuer_connects_per_minute INT8 NOT NULL DEFAULT 0 CHECK (issuer_connects_per_minute >= -1)`,
	`ALTER TABLE quotas ADD COLUMN prompts_per_minute INT8 NOT NULL DEFAULT 0 CHECK (prompts_per_minute >= -1)`,
	// The issuer-wide prompt rate (billing.Quota.IssuerPromptsPerMinute), read as the others above.
	`ALTER TABLE quotas ADD COLUMN issuer_prompts_per_minute INT8 NOT NULL DEFAULT 0 CHECK (issuer_prompts_per_minute >= -1)`,
	// The sandbox's hard limits (billing.SandboxQuota), read as the admission fields above, one column per
	// step; their minimums are checked by billing.Quota.Validate, not here, so that they may change without
	// a migration.
	`ALTER TABLE quotas ADD COLUMN max_processes INT8 NOT NULL DEFAULT 0 CHECK (max_processes >= -1)`,
	`ALTER TABLE quotas ADD COLUMN max_memory_bytes INT8 NOT NULL DEFAULT 0 CHECK (max_memory_bytes >= -1)`,
	`ALTER TABLE quotas ADD COLUMN cpu_millis INT8 NOT NULL DEFAULT 0 CHECK (cpu_millis >= -1)`,
	`ALTER TABLE quotas ADD COLUMN max_tmp_bytes INT8 NOT NULL DEFAULT 0 CHECK (max_tmp_bytes >= -1)`,
	`ALTER TABLE quotas ADD COLUMN max_workspace_bytes INT8 NOT NULL DEFAULT 0 CHECK (max_workspace_bytes >= -1)`,
	`ALTER TABLE quotas ADD COLUMN max_concurrent_execs INT8 NOT NULL DEFAULT 0 CHECK (max_concurrent_execs >= -1)`,
	`ALTER TABLE quotas ADD COLUMN max_stored_bytes INT8 NOT NULL DEFAULT 0 CHECK (max_stored_bytes >= -1)`,
	// The sandbox's per-user limits that were runner and edge flags (billing.SandboxQuota), read as the hard
	// limits above, one column per step; minimums and ceilings are billing's.
	`ALTER TABLE quotas ADD COLUMN max_background_processes INT8 NOT NULL DEFAULT 0 CHECK (max_background_processes >= -1)`,
	`ALTER TABLE quotas ADD COLUMN max_process_log_bytes INT8 NOT NULL DEFAULT 0 CHECK (max_process_log_bytes >= -1)`,
	`ALTER TABLE quotas ADD COLUMN max_file_watches INT8 NOT NULL DEFAULT 0 CHECK (max_file_watches >= -1)`,
	`ALTER TABLE quotas ADD COLUMN max_terminals INT8 NOT NULL DEFAULT 0 CHECK (max_terminals >= -1)`,
	`ALTER TABLE quotas ADD COLUMN max_tasks INT8 NOT NULL DEFAULT 0 CHECK (max_tasks >= -1)`,
	`ALTER TABLE quotas ADD COLUMN max_preview_urls INT8 NOT NULL DEFAULT 0 CHECK (max_preview_urls >= -1)`,
	// Issuers' scoped keys of the billing API (billing.APIKeys, apikeys.go): the SHA-256 of each secret,
	// never the secret. The index serves the per-issuer list.
	`CREATE TABLE api_keys (
		id      TEXT        PRIMARY KEY,
		issuer  TEXT        NOT NULL,
		name    TEXT        NOT NULL,
		hash    BYTEA       NOT NULL,
		created TIMESTAMPTZ NOT NULL
	)`,
	`CREATE INDEX api_keys_by_issuer ON api_keys (issuer, id)`,
	// A disabled issuer's tokens are refused by the edges (billing.Issuer.Disabled).
	`ALTER TABLE issuers ADD COLUMN disabled BOOL NOT NULL DEFAULT false`,
}

// multiRegionMigrations run only on a multi-region CockroachDB database (cockroachdb.IsMultiRegion), as
// the schema "ledger-multiregion": PostgreSQL and single-region CockroachDB reject table localities. Each
// table becomes REGIONAL BY ROW: a row is homed (leaseholder and voting replicas) in the region that
// inserted it — the runner's region, where its user's events, totals and holds are written and read — while
// the primary keys stay unique across regions, so idempotency keys and hold ids keep their meaning.
//
// The billing API's tables are GLOBAL instead: every region reads issuers, quotas and prices (an edge
// admitting a session, a runner pricing a call) without leaving the region, and the rare writes of the
// platform team pay the cross-region commit.
var multiRegionMigrations = []string{
	`ALTER TABLE usage_events SET LOCALITY REGIONAL BY ROW`,
	`ALTER TABLE usage_totals SET LOCALITY REGIONAL BY ROW`,
	`ALTER TABLE holds SET LOCALITY REGIONAL BY ROW`,
	`ALTER TABLE issuers SET LOCALITY GLOBAL`,
	`ALTER TABLE quotas SET LOCALITY GLOBAL`,
	`ALTER TABLE prices SET LOCALITY GLOBAL`,
	`ALTER TABLE api_keys SET LOCALITY GLOBAL`,
}

// Ledger is a billing.Ledger, billing.Reserver and billing.AdminStore over a CockroachDB (or PostgreSQL)
// database. Safe for concurrent use, by any number of processes on one database.
type Ledger struct {
	pool *pgxpool.Pool
	srv  cockroachdb.Server
	now  func() time.Time

	// The process's Reserve, Settle, Release and Record calls share transactions, one at a time, so that
	// they never conflict with one another; its Usage reads share statements, two at a time.
	writes  batcher[*writeOp]
	reads   batcher[*readOp]
	retries atomic.Int64
}

var _ billing.Ledger = (*Ledger)(nil)

// Config configures New.
type Config struct {
	// Pool is the database the ledger is stored in (required). The caller keeps ownership of it and closes
	// it after the last call.
	Pool *pgxpool.Pool
	// Now is the clock that stamps events recorded without At and decides when holds expire (default
	// time.Now). Processes sharing one database should agree on the time: a hold expires by the clock of
	// whoever looks at it.
	Now func() time.Time
}

// New returns a ledger on cfg.Pool, creating or migrating its tables if needed (several processes may do
// so at once): the ledger's, the session leases' and the rate buckets', so that Sessions and RateBuckets do
// no I/O. A Config without Pool is an error.
func New(ctx context.Context, cfg Config) (*Ledger, error) {
	if cfg.Pool == nil {
		return nil, errors.New("open ledger: Config.Pool is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pool := cfg.Pool
	l := &Ledger{pool: pool, now: cfg.Now}
	l.writes = batcher[*writeOp]{lanes: 1, max: maxBatch, run: l.runWrites}
	l.reads = batcher[*readOp]{lanes: 2, max: maxBatch, run: l.readBatch}
	var err error
	if l.srv, err = cockroachdb.Detect(ctx, pool); err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	// Each schema keeps its own name and history, so databases migrated before New ran them all (when
	// Sessions and RateBuckets migrated their own) carry on where they were.
	schemas := []struct {
		name       string
		migrations []string
	}{
		{"ledger", migrations},
		{"sessions", sessionMigrations},
		{"rates", rateMigrations},
	}
	for _, s := range schemas {
		if err := cockroachdb.Migrate(ctx, pool, s.name, s.migrations); err != nil {
			return nil, fmt.Errorf("open ledger: %w", err)
		}
	}
	multi, err := cockroachdb.IsMultiRegion(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	if multi {
		if err := cockroachdb.Migrate(ctx, pool, "ledger-multiregion", multiRegionMigrations); err != nil {
			return nil, fmt.Errorf("open ledger: %w", err)
		}
		if err := cockroachdb.Migrate(ctx, pool, "rates-multiregion", rateMultiRegionMigrations); err != nil {
			return nil, fmt.Errorf("open ledger: %w", err)
		}
	}
	return l, nil
}

// Usage reads the account's running totals and, in the same snapshot, the sum of its unexpired holds (one
// statement, so a concurrent Settle is seen either wholly or not at all). Concurrent calls of the process
// share a statement (readBatch). Database failures wrap billing.ErrUnavailable.
func (l *Ledger) Usage(ctx context.Context, acct billing.Account) (billing.Usage, error) {
	if err := acct.Validate(); err != nil {
		return billing.Usage{}, fmt.Errorf("usage: %w", err)
	}
	op := &readOp{waiter: newWaiter(ctx), acct: acct}
	err := l.reads.do(op)
	if err == nil {
		err = op.err
	}
	if err != nil {
		return billing.Usage{}, fmt.Errorf("usage of %s: %w", acct, billing.ClassifyStore(err, nil))
	}
	return op.u, nil
}

// A readOp is one Usage waiting for its batch.
type readOp struct {
	waiter
	acct billing.Account
	u    billing.Usage
	err  error
}

// readBatch reads the usage of a batch's accounts in one statement. It is a read that need not be
// serializable: one statement sees one snapshot, and Reserve reads again what it grants against in its own
// serializable transaction. So on PostgreSQL it runs at READ COMMITTED, where it takes no predicate locks
// that would make the writers' transactions fail, in one round trip (BEGIN, the read and COMMIT
// pipelined). On CockroachDB it is the statement alone, an implicit SERIALIZABLE transaction (its READ
// COMMITTED may be switched off by a cluster setting); a read the server asks to retry is retried here. A
// read the database refuses for an account's strings is run again account by account (callsFault).
func (l *Ledger) readBatch(ctx context.Context, batch []*readOp) {
	var (
		rows accountRows
		seen = map[acctKey]bool{}
	)
	for _, op := range batch {
		if k := keyOf(op.acct); !seen[k] {
			seen[k] = true
			rows.add(op.acct)
		}
	}
	var (
		usage map[acctKey]billing.Usage
		err   error
	)
	for attempt := 0; attempt < readAttempts; attempt++ {
		if usage, err = l.readUsage(ctx, rows); cockroachdb.Classify(err) != cockroachdb.Retryable {
			break
		}
		l.retries.Add(1)
	}
	if callsFault(ctx, err, len(rows.issuer)) { // one account the database refuses fails alone
		for _, op := range batch {
			l.readBatch(ctx, []*readOp{op})
		}
		return
	}
	for _, op := range batch {
		op.u, op.err = usage[keyOf(op.acct)], err
		op.finish()
	}
}

// readAttempts bounds the attempts of a usage read the server asks to retry.
const readAttempts = 10

func (l *Ledger) readUsage(ctx context.Context, rows accountRows) (map[acctKey]billing.Usage, error) {
	if l.srv == cockroachdb.CockroachDB { // one statement is a transaction of its own, SERIALIZABLE
		r, err := l.pool.Query(ctx, usageSQL, rows.issuer, rows.user, rows.window, rows.start, l.now())
		if err != nil {
			return nil, err
		}
		return scanUsage(r)
	}
	var b pgx.Batch
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED, READ ONLY`)
	b.Queue(usageSQL, rows.issuer, rows.user, rows.window, rows.start, l.now())
	b.Queue(`COMMIT`)
	br := l.pool.SendBatch(ctx, &b)
	_, err := br.Exec()
	var usage map[acctKey]billing.Usage
	if err == nil {
		var r pgx.Rows
		if r, err = br.Query(); err == nil {
			usage, err = scanUsage(r)
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return usage, err
}

// Stats counts what the ledger did since New, for load tools and tests.
type Stats struct {
	// Retries are transactions (and usage reads) run again after a serialization failure.
	Retries int64
	// WriteBatches and Writes are the write transactions (each a batch) and the Reserve, Settle, Release and
	// Record calls they ran; ReadBatches and Reads the same for Usage.
	WriteBatches, Writes, ReadBatches, Reads int64
}

// Stats returns the ledger's counts so far.
func (l *Ledger) Stats() Stats {
	return Stats{
		Retries:      l.retries.Load(),
		WriteBatches: l.writes.batches.Load(), Writes: l.writes.calls.Load(),
		ReadBatches: l.reads.batches.Load(), Reads: l.reads.calls.Load(),
	}
}

// tx runs f in one serializable transaction, retried on serialization failures (cockroachdb.ExecuteTx),
// counting the retries.
func (l *Ledger) tx(ctx context.Context, opts cockroachdb.TxOptions, f func(tx pgx.Tx) error) error {
	attempts := 0
	defer func() {
		if attempts > 1 {
			l.retries.Add(int64(attempts - 1))
		}
	}()
	return cockroachdb.ExecuteTx(ctx, l.pool, l.srv, opts, func(tx pgx.Tx) error {
		attempts++
		return f(tx)
	})
}

// maxBatch bounds the calls of one batch.
const maxBatch = 256

// epoch is the stored window start of the lifetime window.
var epoch = time.Unix(0, 0).UTC()

// windowStart is the stored form of the account's window start: truncated to the second (as billing/sqlite
// stores it, so both ledgers agree on which starts name one account), the Unix epoch for the lifetime
// window.
func windowStart(a billing.Account) time.Time {
	if a.Window == billing.Lifetime {
		return epoch
	}
	return time.Unix(a.WindowStart.Unix(), 0).UTC()
}
