// Package sqlite is the embedded billing.Ledger and billing.Reserver used by warren dev: usage events,
// per-window totals and budget holds in one SQLite file. Recording is idempotent by event key, and the totals
// move in the same transaction as the event insert, so a redelivered event can never be counted twice; a
// hold is granted in the same write transaction that reads what is used and held, so concurrent callers,
// in this process or another, cannot overspend.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/sqlitedb"
)

// migrations are append-only; see sqlitedb.Migrate. Times are Unix seconds UTC (window_start, 0 for the
// lifetime window) and Unix nanoseconds UTC (at, expires_at).
var migrations = []string{
	`CREATE TABLE usage_events (
		key             TEXT    PRIMARY KEY,
		issuer          TEXT    NOT NULL,
		"user"          TEXT    NOT NULL,
		"window"        TEXT    NOT NULL,
		window_start    INTEGER NOT NULL,
		kind            TEXT    NOT NULL,
		model           TEXT    NOT NULL DEFAULT '',
		ai_micros       INTEGER NOT NULL CHECK (ai_micros >= 0),
		compute_seconds INTEGER NOT NULL CHECK (compute_seconds >= 0),
		at              INTEGER NOT NULL
	);
	CREATE TABLE usage_totals (
		issuer          TEXT    NOT NULL,
		"user"          TEXT    NOT NULL,
		"window"        TEXT    NOT NULL,
		window_start    INTEGER NOT NULL,
		ai_micros       INTEGER NOT NULL DEFAULT 0,
		compute_seconds INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (issuer, "user", "window", window_start)
	)`,
	// Holds (billing.Reserver). The index serves both per-account reads of Reserve and Usage: the sum of the
	// unexpired holds and the sweep of the expired ones.
	`CREATE TABLE holds (
		id           TEXT    PRIMARY KEY,
		issuer       TEXT    NOT NULL,
		"user"       TEXT    NOT NULL,
		"window"     TEXT    NOT NULL,
		window_start INTEGER NOT NULL,
		granted      INTEGER NOT NULL CHECK (granted > 0),
		expires_at   INTEGER NOT NULL
	);
	CREATE INDEX holds_by_account ON holds (issuer, "user", "window", window_start, expires_at)`,
	// The billing API's tables (admin.go). created is Unix seconds UTC; a quota's "user" is '' for the
	// issuer's default.
	`CREATE TABLE issuers (
		id      TEXT    PRIMARY KEY,
		name    TEXT    NOT NULL,
		created INTEGER NOT NULL
	);
	CREATE TABLE quotas (
		issuer          TEXT    NOT NULL,
		"user"          TEXT    NOT NULL,
		ai_micros       INTEGER NOT NULL CHECK (ai_micros >= -1),
		compute_seconds INTEGER NOT NULL CHECK (compute_seconds >= -1),
		"window"        TEXT    NOT NULL,
		max_sessions    INTEGER NOT NULL CHECK (max_sessions >= -1),
		revision        INTEGER NOT NULL CHECK (revision > 0),
		PRIMARY KEY (issuer, "user")
	);
	CREATE TABLE prices (
		model          TEXT    PRIMARY KEY,
		input          INTEGER NOT NULL CHECK (input >= 0),
		output         INTEGER NOT NULL CHECK (output >= 0),
		cache_read     INTEGER NOT NULL CHECK (cache_read >= 0),
		cache_creation INTEGER NOT NULL CHECK (cache_creation >= 0)
	)`,
	// Usage reports (QueryUsage) select events by time, for every issuer or for one issuer or user.
	`CREATE INDEX usage_events_by_time ON usage_events (at);
	CREATE INDEX usage_events_by_user ON usage_events (issuer, "user", at)`,
	// Session leases (billing.Sessions, sessions.go). The index serves the per-issuer count and sweep;
	// its prefix, the per-user count.
	`CREATE TABLE session_leases (
		id         TEXT    PRIMARY KEY,
		issuer     TEXT    NOT NULL,
		"user"     TEXT    NOT NULL,
		expires_at INTEGER NOT NULL
	);
	CREATE INDEX session_leases_by_user ON session_leases (issuer, "user", expires_at)`,
	// The quotas' admission fields (billing.Quota): 0 is not set, so quotas written before them keep the
	// edge's defaults; -1 is unlimited.
	`ALTER TABLE quotas ADD COLUMN max_issuer_sessions INTEGER NOT NULL DEFAULT 0 CHECK (max_issuer_sessions >= -1);
	ALTER TABLE quotas ADD COLUMN connects_per_minute INTEGER NOT NULL DEFAULT 0 CHECK (connects_per_minute >= -1);
	ALTER TABLE quotas ADD COLUMN issuer_connects_per_minute INTEGER NOT NULL DEFAULT 0 CHECK (issuer_connects_per_minute >= -1);
	ALTER TABLE quotas ADD COLUMN prompts_per_minute INTEGER NOT NULL DEFAULT 0 CHECK (prompts_per_minute >= -1)`,
	// The issuer-wide prompt rate (billing.Quota.IssuerPromptsPerMinute), read as the others above.
	`ALTER TABLE quotas ADD COLUMN issuer_prompts_per_minute INTEGER NOT NULL DEFAULT 0 CHECK (issuer_prompts_per_minute >= -1)`,
	// The sandbox's hard limits (billing.SandboxQuota), read as the admission fields above; their minimums
	// are checked by billing.Quota.Validate, not here, so that they may change without a migration.
	`ALTER TABLE quotas ADD COLUMN max_processes INTEGER NOT NULL DEFAULT 0 CHECK (max_processes >= -1);
	ALTER TABLE quotas ADD COLUMN max_memory_bytes INTEGER NOT NULL DEFAULT 0 CHECK (max_memory_bytes >= -1);
	ALTER TABLE quotas ADD COLUMN cpu_millis INTEGER NOT NULL DEFAULT 0 CHECK (cpu_millis >= -1);
	ALTER TABLE quotas ADD COLUMN max_tmp_bytes INTEGER NOT NULL DEFAULT 0 CHECK (max_tmp_bytes >= -1);
	ALTER TABLE quotas ADD COLUMN max_workspace_bytes INTEGER NOT NULL DEFAULT 0 CHECK (max_workspace_bytes >= -1);
	ALTER TABLE quotas ADD COLUMN max_concurrent_execs INTEGER NOT NULL DEFAULT 0 CHECK (max_concurrent_execs >= -1);
	ALTER TABLE quotas ADD COLUMN max_stored_bytes INTEGER NOT NULL DEFAULT 0 CHECK (max_stored_bytes >= -1)`,
	// The sandbox's per-user limits that were runner and edge flags (billing.SandboxQuota), read as the hard
	// limits above: 0 not set (the flag applies), -1 unlimited; minimums and ceilings are billing's.
	`ALTER TABLE quotas ADD COLUMN max_background_processes INTEGER NOT NULL DEFAULT 0 CHECK (max_background_processes >= -1);
	ALTER TABLE quotas ADD COLUMN max_process_log_bytes INTEGER NOT NULL DEFAULT 0 CHECK (max_process_log_bytes >= -1);
	ALTER TABLE quotas ADD COLUMN max_file_watches INTEGER NOT NULL DEFAULT 0 CHECK (max_file_watches >= -1);
	ALTER TABLE quotas ADD COLUMN max_terminals INTEGER NOT NULL DEFAULT 0 CHECK (max_terminals >= -1);
	ALTER TABLE quotas ADD COLUMN max_tasks INTEGER NOT NULL DEFAULT 0 CHECK (max_tasks >= -1);
	ALTER TABLE quotas ADD COLUMN max_preview_urls INTEGER NOT NULL DEFAULT 0 CHECK (max_preview_urls >= -1)`,
	// Issuers' scoped keys of the billing API (billing.APIKeys, apikeys.go): the SHA-256 of each secret,
	// never the secret. The index serves the per-issuer list.
	`CREATE TABLE api_keys (
		id      TEXT    PRIMARY KEY,
		issuer  TEXT    NOT NULL,
		name    TEXT    NOT NULL,
		hash    BLOB    NOT NULL,
		created INTEGER NOT NULL
	);
	CREATE INDEX api_keys_by_issuer ON api_keys (issuer, id)`,
	// A disabled issuer's tokens are refused by the edges (billing.Issuer.Disabled).
	`ALTER TABLE issuers ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1))`,
}

// Ledger is a billing.Ledger and billing.Reserver over a SQLite file.
type Ledger struct {
	db  *sql.DB
	st  statements
	now func() time.Time
}

var _ billing.Ledger = (*Ledger)(nil)

// Config configures New.
type Config struct {
	// Path is the ledger's SQLite file (required), created if missing. Several processes may share it.
	Path string
	// Now is the clock that stamps events recorded without At and decides when holds expire (default
	// time.Now). Processes sharing one file should agree on the time: a hold expires by the clock of whoever
	// looks at it.
	Now func() time.Time
}

// New opens (creating and migrating if needed) the ledger database at cfg.Path: the ledger's tables, the
// session leases' and the rate buckets', so that Sessions and RateBuckets do no I/O. A Config without Path
// is an error.
func New(ctx context.Context, cfg Config) (*Ledger, error) {
	if cfg.Path == "" {
		return nil, errors.New("open ledger: Config.Path is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := &Ledger{now: cfg.Now}
	db, err := sqlitedb.Open(ctx, cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	// Each schema keeps its own name and history, so files migrated before New ran them all (when
	// RateBuckets migrated its own) carry on where they were.
	for _, s := range []struct {
		name       string
		migrations []string
	}{{"ledger", migrations}, {"rates", rateMigrations}} {
		if err := sqlitedb.Migrate(ctx, db, s.name, s.migrations); err != nil {
			db.Close()
			return nil, fmt.Errorf("open ledger: %w", err)
		}
	}
	if err := l.st.prepare(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	l.db = db
	return l, nil
}

// Close closes the database. It is safe to call more than once; afterwards every call fails with
// ErrUnavailable.
func (l *Ledger) Close() error {
	l.st.close()
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("close ledger: %w", err)
	}
	return nil
}

// Usage reads the account's running totals and, in the same snapshot, the sum of its unexpired holds (one
// statement, so a concurrent Settle is seen either wholly or not at all). Database failures wrap
// billing.ErrUnavailable.
// usageQuery is Usage's: the account's totals and its live holds. It runs for every admission (every exec,
// file call and agent connect at an edge), so it is prepared once (statements): parsing and planning it
// was three quarters of its cost.
const usageQuery = `SELECT
		COALESCE(t.ai_micros, 0), COALESCE(t.compute_seconds, 0),
		(SELECT COALESCE(SUM(granted), 0) FROM holds
			WHERE issuer = ?1 AND "user" = ?2 AND "window" = ?3 AND window_start = ?4 AND expires_at > ?5)
		FROM (SELECT 1) LEFT JOIN usage_totals t
			ON t.issuer = ?1 AND t."user" = ?2 AND t."window" = ?3 AND t.window_start = ?4`

func (l *Ledger) Usage(ctx context.Context, acct billing.Account) (billing.Usage, error) {
	if err := acct.Validate(); err != nil {
		return billing.Usage{}, fmt.Errorf("usage: %w", err)
	}
	var u billing.Usage
	start := windowStart(acct)
	err := l.st.usage.QueryRowContext(ctx,
		acct.Issuer, acct.User, string(acct.Window), start, l.now().UTC().UnixNano(),
	).Scan(&u.AIMicros, &u.ComputeSeconds, &u.HeldAIMicros)
	if err != nil {
		return billing.Usage{}, fmt.Errorf("usage of %s/%s: %w", acct.Issuer, acct.User, billing.ClassifyStore(err, nil))
	}
	return u, nil
}

// Record inserts the event unless its key is already stored and, only if it inserted, adds its amounts to
// the account's totals, all in one transaction. An event without At is stamped with the ledger's clock.
// Invalid events wrap billing.ErrInvalid; database failures wrap billing.ErrUnavailable.
func (l *Ledger) Record(ctx context.Context, ev billing.UsageEvent) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if err := l.record(ctx, ev); err != nil {
		return fmt.Errorf("record usage event %s: %w", ev.Key, billing.ClassifyStore(err, nil))
	}
	return nil
}

func (l *Ledger) record(ctx context.Context, ev billing.UsageEvent) error {
	return l.inTx(ctx, func(tx *sql.Tx) error { return l.recordTx(ctx, tx, ev) })
}

// recordTx inserts ev unless its key is stored and, only if it inserted, adds its amounts to the totals.
func (l *Ledger) recordTx(ctx context.Context, tx *sql.Tx, ev billing.UsageEvent) error {
	at := ev.At
	if at.IsZero() {
		at = l.now()
	}
	acct, start := ev.Account, windowStart(ev.Account)
	res, err := tx.StmtContext(ctx, l.st.insertEvent).ExecContext(ctx, ev.Key, acct.Issuer, acct.User, string(acct.Window), start, ev.Kind, ev.Model,
		ev.AIMicros, ev.ComputeSeconds, at.UTC().UnixNano())
	if err != nil {
		return fmt.Errorf("insert event: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("insert event: %w", err)
	}
	if n == 0 {
		return nil // already recorded: the first delivery counted it
	}
	if _, err := tx.StmtContext(ctx, l.st.addTotals).ExecContext(ctx, acct.Issuer, acct.User, string(acct.Window), start, ev.AIMicros, ev.ComputeSeconds); err != nil {
		return fmt.Errorf("add to totals: %w", err)
	}
	return nil
}

// inTx runs f in one transaction and commits if f returns nil. sqlitedb opens every transaction with BEGIN
// IMMEDIATE, so f holds the database's write lock from its first statement: transactions of this and
// every other process on the file are serialized, and a read inside f stays true until the commit.
func (l *Ledger) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// windowStart is the stored form of the account's window start: Unix seconds UTC, 0 for the lifetime window.
// Sub-second starts are truncated.
func windowStart(a billing.Account) int64 {
	if a.Window == billing.Lifetime {
		return 0
	}
	return a.WindowStart.Unix()
}
