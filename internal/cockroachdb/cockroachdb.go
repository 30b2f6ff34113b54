// Package cockroachdb connects Warren's production adapters (billing/cockroach, scheduler/cockroach) to
// CockroachDB through pgx, and runs them on PostgreSQL too, which tests use as a wire-compatible stand-in
// (docs/ARCHITECTURE.md#ports-and-adapters): one pool configuration (Open), server detection (Detect,
// IsCockroach, IsMultiRegion), versioned schemas safe under concurrent starts (Migrate), serializable
// transactions with retries (ExecuteTx) and the one place SQLSTATEs are classified (Classify).
package cockroachdb

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Open connects a pool to the database at dsn (a postgres:// URL or key=value string; pgxpool's pool_*
// parameters override the defaults below) and checks that the server answers.
//
// Defaults: at most max(4, CPUs) connections (pgx's default), connections live an hour with up to 10 %
// jitter so a fleet does not reconnect at once and new CockroachDB nodes receive connections, and a
// connection attempt gives up after 5 s (pgx would wait two minutes) so an unreachable database fails
// requests quickly. Callers close the pool.
func Open(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The parse error may quote the DSN, password included: name the problem, not the input.
		return nil, fmt.Errorf("open database: parse dsn: %s", redact(err.Error(), dsn))
	}
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if !strings.Contains(dsn, "pool_max_conn_lifetime_jitter") {
		cfg.MaxConnLifetimeJitter = cfg.MaxConnLifetime / 10
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", describe(cfg), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open database %s: %w", describe(cfg), err)
	}
	return pool, nil
}

func describe(cfg *pgxpool.Config) string {
	return fmt.Sprintf("%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
}

func redact(msg, dsn string) string {
	if dsn == "" {
		return msg
	}
	return strings.ReplaceAll(msg, dsn, "<dsn>")
}

// Server is the kind of server behind a pool.
type Server int

const (
	PostgreSQL Server = iota
	CockroachDB
)

func (s Server) String() string {
	if s == CockroachDB {
		return "CockroachDB"
	}
	return "PostgreSQL"
}

// Detect reads `SELECT version()`: CockroachDB reports "CockroachDB CCL v…", PostgreSQL "PostgreSQL 15…".
func Detect(ctx context.Context, pool *pgxpool.Pool) (Server, error) {
	var v string
	if err := pool.QueryRow(ctx, `SELECT version()`).Scan(&v); err != nil {
		return PostgreSQL, fmt.Errorf("detect server: %w", err)
	}
	return serverOf(v), nil
}

func serverOf(version string) Server {
	if strings.Contains(version, "CockroachDB") {
		return CockroachDB
	}
	return PostgreSQL
}

// IsCockroach reports whether pool talks to CockroachDB (rather than PostgreSQL).
func IsCockroach(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	s, err := Detect(ctx, pool)
	return s == CockroachDB, err
}

// IsMultiRegion reports whether pool's current database is a multi-region CockroachDB database (one given
// a PRIMARY REGION): only there may tables take a multi-region locality such as REGIONAL BY ROW. It looks
// for the region enum, crdb_internal_region, that CockroachDB creates in such a database, which needs no
// admin privilege (SHOW REGIONS does). Always false on PostgreSQL.
func IsMultiRegion(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	s, err := Detect(ctx, pool)
	if err != nil || s != CockroachDB {
		return false, err
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_type WHERE typname = 'crdb_internal_region'`).Scan(&n); err != nil {
		return false, fmt.Errorf("detect multi-region database: %w", err)
	}
	return n > 0, nil
}
