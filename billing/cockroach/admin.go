package cockroach

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/cockroachdb"
)

// The billing API's storage (billing.AdminStore) on the ledger's database, with the semantics of
// billing/sqlite's, which the contract suite billing/admintest holds both to: usage reports give the same
// rows, in the same order, for the same events.
//
// Every call is one serializable transaction (read-only for reads), so a report's page and its totals come
// from one snapshot and a quota's compare-and-set cannot lose a race in any number of processes. Errors:
// bad input wraps billing.ErrInvalid; a missing issuer, quota or price billing.ErrNotFound; a stale quota
// revision billing.ErrConflict; an unreachable database (and a commit whose outcome is unknown)
// billing.ErrUnavailable; anything else (a bug, an overflowing sum) comes back as the database said it.

var _ billing.AdminStore = (*Ledger)(nil)

// PutIssuer registers id or renames it, keeping its creation time (billing.Issuers). The creation time is
// the ledger's clock truncated to the second, as billing/sqlite keeps it. Running it again after an
// ambiguous commit renames to the same name, so it is retried.
func (l *Ledger) PutIssuer(ctx context.Context, id, name string) (billing.Issuer, error) {
	if !billing.ValidName(id) || !billing.ValidIssuerName(name) {
		return billing.Issuer{}, fmt.Errorf("put issuer %q: bad id or name: %w", id, billing.ErrInvalid)
	}
	var iss billing.Issuer
	err := l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		created := time.Unix(l.now().Unix(), 0).UTC()
		if _, err := tx.Exec(ctx, `INSERT INTO issuers (id, name, created) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET name = excluded.name`, id, name, created); err != nil {
			return fmt.Errorf("upsert: %w", err)
		}
		var err error
		iss, err = getIssuer(ctx, tx, id)
		return err
	})
	if err != nil {
		return billing.Issuer{}, fmt.Errorf("put issuer %s: %w", id, billing.ClassifyStore(err, transient))
	}
	return iss, nil
}

// GetIssuer returns the registered issuer id with its default quota (billing.Issuers).
func (l *Ledger) GetIssuer(ctx context.Context, id string) (billing.Issuer, error) {
	if !billing.ValidName(id) {
		return billing.Issuer{}, fmt.Errorf("get issuer: bad id: %w", billing.ErrInvalid)
	}
	var iss billing.Issuer
	err := l.tx(ctx, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		var err error
		iss, err = getIssuer(ctx, tx, id)
		return err
	})
	if err != nil {
		return billing.Issuer{}, fmt.Errorf("get issuer %s: %w", id, billing.ClassifyStore(err, transient))
	}
	return iss, nil
}

// ListIssuers returns every registered issuer with its default quota, ordered by id byte by byte, as
// billing/sqlite orders them (billing.Issuers).
func (l *Ledger) ListIssuers(ctx context.Context) ([]billing.Issuer, error) {
	var out []billing.Issuer
	err := l.tx(ctx, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		out = nil
		rows, err := tx.Query(ctx, issuerSelect+` ORDER BY `+l.bytewise("i.id"))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			iss, err := scanIssuer(rows)
			if err != nil {
				return err
			}
			out = append(out, iss)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list issuers: %w", billing.ClassifyStore(err, transient))
	}
	return out, nil
}

// SetIssuerDisabled disables or enables issuer id (billing.Issuers). Setting the same value again is
// harmless, so it is retried after an ambiguous commit.
func (l *Ledger) SetIssuerDisabled(ctx context.Context, id string, disabled bool) (billing.Issuer, error) {
	if !billing.ValidName(id) {
		return billing.Issuer{}, fmt.Errorf("set issuer disabled: bad id: %w", billing.ErrInvalid)
	}
	var iss billing.Issuer
	err := l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		if err := issuerRegistered(ctx, tx, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE issuers SET disabled = $1 WHERE id = $2`, disabled, id); err != nil {
			return fmt.Errorf("update: %w", err)
		}
		var err error
		iss, err = getIssuer(ctx, tx, id)
		return err
	})
	if err != nil {
		return billing.Issuer{}, fmt.Errorf("set issuer %s disabled %v: %w", id, disabled, billing.ClassifyStore(err, transient))
	}
	return iss, nil
}

const issuerSelect = `SELECT i.id, i.name, i.created,
	q.ai_micros, q.compute_seconds, q."window", q.max_sessions, q.revision,
	q.max_issuer_sessions, q.connects_per_minute, q.issuer_connects_per_minute, q.prompts_per_minute,
	q.issuer_prompts_per_minute,
	COALESCE(q.max_processes, 0), COALESCE(q.max_memory_bytes, 0), COALESCE(q.cpu_millis, 0), COALESCE(q.max_tmp_bytes, 0),
	COALESCE(q.max_workspace_bytes, 0), COALESCE(q.max_concurrent_execs, 0), COALESCE(q.max_stored_bytes, 0),
	COALESCE(q.max_background_processes, 0), COALESCE(q.max_process_log_bytes, 0), COALESCE(q.max_file_watches, 0), COALESCE(q.max_terminals, 0), COALESCE(q.max_tasks, 0), COALESCE(q.max_preview_urls, 0),
	i.disabled
	FROM issuers AS i LEFT JOIN quotas AS q ON q.issuer = i.id AND q."user" = ''`

func getIssuer(ctx context.Context, tx pgx.Tx, id string) (billing.Issuer, error) {
	iss, err := scanIssuer(tx.QueryRow(ctx, issuerSelect+` WHERE i.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return billing.Issuer{}, fmt.Errorf("issuer %q is not registered: %w", id, billing.ErrNotFound)
	}
	return iss, err
}

// scanIssuer reads a row of issuerSelect; the quota's columns are NULL when the issuer has no default.
func scanIssuer(row pgx.Row) (billing.Issuer, error) {
	var (
		iss                        billing.Issuer
		ai, compute, sessions, rev *int64
		issuerSessions, connects   *int64
		issuerConnects, prompts    *int64
		issuerPrompts              *int64
		window                     *string
		sb                         billing.SandboxQuota
	)
	if err := row.Scan(&iss.ID, &iss.Name, &iss.Created, &ai, &compute, &window, &sessions, &rev,
		&issuerSessions, &connects, &issuerConnects, &prompts, &issuerPrompts,
		&sb.MaxProcesses, &sb.MaxMemoryBytes, &sb.CPUMillis, &sb.MaxTmpBytes, &sb.MaxWorkspaceBytes, &sb.MaxConcurrentExecs,
		&sb.MaxStoredBytes, &sb.MaxBackgroundProcesses, &sb.MaxProcessLogBytes, &sb.MaxFileWatches, &sb.MaxTerminals, &sb.MaxTasks, &sb.MaxPreviewURLs, &iss.Disabled); err != nil {
		return billing.Issuer{}, err
	}
	iss.Created = iss.Created.UTC()
	if rev != nil && ai != nil && compute != nil && window != nil && sessions != nil &&
		issuerSessions != nil && connects != nil && issuerConnects != nil && prompts != nil && issuerPrompts != nil {
		iss.Quota = &billing.Quota{AIMicros: *ai, ComputeSeconds: *compute, Window: billing.Window(*window),
			MaxConcurrentSessions: *sessions, Revision: *rev, MaxIssuerSessions: *issuerSessions,
			ConnectsPerMinute: *connects, IssuerConnectsPerMinute: *issuerConnects, PromptsPerMinute: *prompts,
			IssuerPromptsPerMinute: *issuerPrompts, SandboxQuota: sb}
	}
	return iss, nil
}

// GetQuota returns the quota stored under k (billing.Quotas).
func (l *Ledger) GetQuota(ctx context.Context, k billing.QuotaKey) (billing.Quota, error) {
	if err := k.Validate(); err != nil {
		return billing.Quota{}, fmt.Errorf("get quota: %w", err)
	}
	var q billing.Quota
	err := l.tx(ctx, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT ai_micros, compute_seconds, "window", max_sessions, revision,
			max_issuer_sessions, connects_per_minute, issuer_connects_per_minute, prompts_per_minute, issuer_prompts_per_minute,
			max_processes, max_memory_bytes, cpu_millis, max_tmp_bytes, max_workspace_bytes, max_concurrent_execs, max_stored_bytes,
			max_background_processes, max_process_log_bytes, max_file_watches, max_terminals, max_tasks, max_preview_urls
			FROM quotas WHERE issuer = $1 AND "user" = $2`, k.Issuer, k.User).
			Scan(&q.AIMicros, &q.ComputeSeconds, &q.Window, &q.MaxConcurrentSessions, &q.Revision,
				&q.MaxIssuerSessions, &q.ConnectsPerMinute, &q.IssuerConnectsPerMinute, &q.PromptsPerMinute,
				&q.IssuerPromptsPerMinute,
				&q.MaxProcesses, &q.MaxMemoryBytes, &q.CPUMillis, &q.MaxTmpBytes, &q.MaxWorkspaceBytes, &q.MaxConcurrentExecs, &q.MaxStoredBytes,
				&q.MaxBackgroundProcesses, &q.MaxProcessLogBytes, &q.MaxFileWatches, &q.MaxTerminals, &q.MaxTasks, &q.MaxPreviewURLs)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("no quota: %w", billing.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return billing.Quota{}, fmt.Errorf("get quota %s: %w", k, billing.ClassifyStore(err, transient))
	}
	return q, nil
}

// PutQuota stores q under k if k's revision is still expected (billing.Quotas). One serializable
// transaction checks that the issuer is registered, reads the revision and writes the next one with a
// compare-and-set on it, so of writers that read the same revision, in this process or another, exactly
// one succeeds: the others' transactions fail to serialize, run again, and find the winner's revision.
//
// It is not run again after an ambiguous commit (a second run would find its own write and answer
// ErrConflict): the caller gets billing.ErrUnavailable and reads the quota to learn what happened.
func (l *Ledger) PutQuota(ctx context.Context, k billing.QuotaKey, q billing.Quota, expected int64) (billing.Quota, error) {
	if err := k.Validate(); err != nil {
		return billing.Quota{}, fmt.Errorf("put quota: %w", err)
	}
	if err := q.ValidateFor(k); err != nil {
		return billing.Quota{}, fmt.Errorf("put quota %s: %w", k, err)
	}
	if expected < 0 {
		return billing.Quota{}, fmt.Errorf("put quota %s: negative revision %d: %w", k, expected, billing.ErrInvalid)
	}
	q.Revision = expected + 1
	err := l.tx(ctx, cockroachdb.TxOptions{}, func(tx pgx.Tx) error {
		if err := issuerRegistered(ctx, tx, k.Issuer); err != nil {
			return err
		}
		var current int64
		err := tx.QueryRow(ctx, `SELECT revision FROM quotas WHERE issuer = $1 AND "user" = $2`, k.Issuer, k.User).Scan(&current)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read revision: %w", err)
		}
		if current != expected {
			return fmt.Errorf("revision %d is stale, the current one is %d: %w", expected, current, billing.ErrConflict)
		}
		var tag pgconn.CommandTag
		if expected == 0 {
			tag, err = tx.Exec(ctx, `INSERT INTO quotas
				(issuer, "user", ai_micros, compute_seconds, "window", max_sessions, revision,
					max_issuer_sessions, connects_per_minute, issuer_connects_per_minute, prompts_per_minute,
					issuer_prompts_per_minute,
					max_processes, max_memory_bytes, cpu_millis, max_tmp_bytes, max_workspace_bytes, max_concurrent_execs, max_stored_bytes,
				max_background_processes, max_process_log_bytes, max_file_watches, max_terminals, max_tasks, max_preview_urls)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)
				ON CONFLICT (issuer, "user") DO NOTHING`,
				k.Issuer, k.User, q.AIMicros, q.ComputeSeconds, string(q.Window), q.MaxConcurrentSessions, q.Revision,
				q.MaxIssuerSessions, q.ConnectsPerMinute, q.IssuerConnectsPerMinute, q.PromptsPerMinute,
				q.IssuerPromptsPerMinute,
				q.MaxProcesses, q.MaxMemoryBytes, q.CPUMillis, q.MaxTmpBytes, q.MaxWorkspaceBytes, q.MaxConcurrentExecs, q.MaxStoredBytes,
				q.MaxBackgroundProcesses, q.MaxProcessLogBytes, q.MaxFileWatches, q.MaxTerminals, q.MaxTasks, q.MaxPreviewURLs)
		} else {
			tag, err = tx.Exec(ctx, `UPDATE quotas SET ai_micros = $3, compute_seconds = $4, "window" = $5,
				max_sessions = $6, revision = $7, max_issuer_sessions = $9, connects_per_minute = $10,
				issuer_connects_per_minute = $11, prompts_per_minute = $12, issuer_prompts_per_minute = $13,
				max_processes = $14, max_memory_bytes = $15, cpu_millis = $16, max_tmp_bytes = $17,
				max_workspace_bytes = $18, max_concurrent_execs = $19, max_stored_bytes = $20,
				max_background_processes = $21, max_process_log_bytes = $22, max_file_watches = $23, max_terminals = $24, max_tasks = $25, max_preview_urls = $26
				WHERE issuer = $1 AND "user" = $2 AND revision = $8`,
				k.Issuer, k.User, q.AIMicros, q.ComputeSeconds, string(q.Window), q.MaxConcurrentSessions, q.Revision, expected,
				q.MaxIssuerSessions, q.ConnectsPerMinute, q.IssuerConnectsPerMinute, q.PromptsPerMinute,
				q.IssuerPromptsPerMinute,
				q.MaxProcesses, q.MaxMemoryBytes, q.CPUMillis, q.MaxTmpBytes, q.MaxWorkspaceBytes, q.MaxConcurrentExecs, q.MaxStoredBytes,
				q.MaxBackgroundProcesses, q.MaxProcessLogBytes, q.MaxFileWatches, q.MaxTerminals, q.MaxTasks, q.MaxPreviewURLs)
		}
		if err != nil {
			return fmt.Errorf("write quota: %w", err)
		}
		if tag.RowsAffected() != 1 { // only if the isolation is weaker than asked: the write must not be lost
			return fmt.Errorf("revision %d changed while writing: %w", expected, billing.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return billing.Quota{}, fmt.Errorf("put quota %s: %w", k, billing.ClassifyStore(err, transient))
	}
	return q, nil
}

// DeleteQuota deletes the quota under k if its revision is expected (billing.Quotas).
func (l *Ledger) DeleteQuota(ctx context.Context, k billing.QuotaKey, expected int64) error {
	if err := k.Validate(); err != nil {
		return fmt.Errorf("delete quota: %w", err)
	}
	err := l.tx(ctx, cockroachdb.TxOptions{}, func(tx pgx.Tx) error {
		var current int64
		err := tx.QueryRow(ctx, `SELECT revision FROM quotas WHERE issuer = $1 AND "user" = $2`, k.Issuer, k.User).Scan(&current)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("no quota: %w", billing.ErrNotFound)
		case err != nil:
			return fmt.Errorf("read revision: %w", err)
		case current != expected:
			return fmt.Errorf("revision %d is stale, the current one is %d: %w", expected, current, billing.ErrConflict)
		}
		tag, err := tx.Exec(ctx, `DELETE FROM quotas WHERE issuer = $1 AND "user" = $2 AND revision = $3`, k.Issuer, k.User, expected)
		if err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		if tag.RowsAffected() != 1 { // only if the isolation is weaker than asked
			return fmt.Errorf("revision %d changed while deleting: %w", expected, billing.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete quota %s: %w", k, billing.ClassifyStore(err, transient))
	}
	return nil
}

// GetPrice returns the override stored for exactly model (billing.PriceStore).
func (l *Ledger) GetPrice(ctx context.Context, model string) (billing.Price, error) {
	if !billing.ValidName(model) {
		return billing.Price{}, fmt.Errorf("get price: bad model name: %w", billing.ErrInvalid)
	}
	var p billing.Price
	err := l.tx(ctx, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT input, output, cache_read, cache_creation FROM prices WHERE model = $1`, model).
			Scan(&p.Input, &p.Output, &p.CacheRead, &p.CacheCreation)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("no override: %w", billing.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return billing.Price{}, fmt.Errorf("get price of %s: %w", model, billing.ClassifyStore(err, transient))
	}
	return p, nil
}

// PutPrice stores or replaces model's override (billing.PriceStore).
func (l *Ledger) PutPrice(ctx context.Context, model string, p billing.Price) error {
	if !billing.ValidName(model) {
		return fmt.Errorf("put price: bad model name: %w", billing.ErrInvalid)
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("put price of %s: %w", model, err)
	}
	err := l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO prices (model, input, output, cache_read, cache_creation)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (model) DO UPDATE SET input = excluded.input,
			output = excluded.output, cache_read = excluded.cache_read, cache_creation = excluded.cache_creation`,
			model, p.Input, p.Output, p.CacheRead, p.CacheCreation)
		return err
	})
	if err != nil {
		return fmt.Errorf("put price of %s: %w", model, billing.ClassifyStore(err, transient))
	}
	return nil
}

// DeletePrice removes model's override (billing.PriceStore).
func (l *Ledger) DeletePrice(ctx context.Context, model string) error {
	if !billing.ValidName(model) {
		return fmt.Errorf("delete price: bad model name: %w", billing.ErrInvalid)
	}
	var deleted int64
	err := l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM prices WHERE model = $1`, model)
		deleted = tag.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("delete price of %s: %w", model, billing.ClassifyStore(err, transient))
	}
	if deleted == 0 {
		return fmt.Errorf("delete price of %s: no override: %w", model, billing.ErrNotFound)
	}
	return nil
}

// ListPrices returns every override by model name (billing.PriceStore).
func (l *Ledger) ListPrices(ctx context.Context) (map[string]billing.Price, error) {
	var out map[string]billing.Price
	err := l.tx(ctx, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		out = map[string]billing.Price{}
		rows, err := tx.Query(ctx, `SELECT model, input, output, cache_read, cache_creation FROM prices`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				m string
				p billing.Price
			)
			if err := rows.Scan(&m, &p.Input, &p.Output, &p.CacheRead, &p.CacheCreation); err != nil {
				return err
			}
			out[m] = p
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list prices: %w", billing.ClassifyStore(err, transient))
	}
	return out, nil
}

// groupKeys are the SQL expressions of the groupings' keys, the same strings billing/sqlite groups by. A
// day is the UTC date of the event time (the nanoseconds in at_nanos cannot move it: days start on a
// microsecond).
var groupKeys = map[billing.GroupBy]string{
	billing.GroupByUser:  `"user"`,
	billing.GroupByModel: `model`,
	billing.GroupByDay:   `to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD')`,
}

// The event times a range bound may name in SQL. Beyond them (far beyond any event a clock stamps) pgx
// cannot encode a TIMESTAMPTZ, so a bound outside is left out (From before minBound, To after maxBound:
// every event qualifies) or selects nothing (From after maxBound, To before minBound).
var (
	minBound = time.Date(-4000, 1, 1, 0, 0, 0, 0, time.UTC)
	maxBound = time.Date(200000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// QueryUsage sums usage events into one page of groups (billing.UsageQuery), in one read-only transaction:
// the page and the totals come from one snapshot. Groups are ordered by issuer and key byte by byte, as
// billing/sqlite orders them, whatever the database's collation; the range [f.From, f.To) is exact to the
// nanosecond. Every page sums the whole range again (the by-time and by-user indexes find its events).
//
// A cursor naming a NUL character, which no stored name holds and PostgreSQL cannot take as a parameter,
// wraps billing.ErrInvalid.
func (l *Ledger) QueryUsage(ctx context.Context, f billing.UsageFilter) (billing.UsagePage, error) {
	if err := f.Validate(); err != nil {
		return billing.UsagePage{}, fmt.Errorf("query usage: %w", err)
	}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	var where []string
	switch {
	case f.From.After(maxBound) || !f.To.After(minBound):
		where = append(where, "FALSE")
	default:
		if !f.From.Before(minBound) {
			at, ns := splitNanos(f.From)
			where = append(where, fmt.Sprintf("(at, at_nanos) >= (%s, %s)", arg(at), arg(ns)))
		}
		if !f.To.After(maxBound) {
			at, ns := splitNanos(f.To)
			where = append(where, fmt.Sprintf("(at, at_nanos) < (%s, %s)", arg(at), arg(ns)))
		}
	}
	if f.Issuer != "" {
		where = append(where, "issuer = "+arg(f.Issuer))
	}
	if f.User != "" {
		where = append(where, `"user" = `+arg(f.User))
	}
	cond := "TRUE"
	if len(where) > 0 {
		cond = strings.Join(where, " AND ")
	}
	condArgs := len(args)
	after := ""
	if f.Cursor != "" {
		c, err := billing.ParseUsageCursor(f.Cursor, f.GroupBy)
		if err != nil {
			return billing.UsagePage{}, fmt.Errorf("query usage: %w", err)
		}
		if strings.ContainsRune(c.Issuer, 0) || strings.ContainsRune(c.Key, 0) {
			return billing.UsagePage{}, fmt.Errorf("query usage: usage cursor names a NUL character: %w", billing.ErrInvalid)
		}
		after = fmt.Sprintf(`WHERE (%s, %s) > (%s, %s)`, l.bytewise("issuer"), l.bytewise("k"), arg(c.Issuer), arg(c.Key))
	}
	// The totals are window sums over every group, taken in t before the cursor's WHERE filters the
	// groups, so every page carries those of the whole range. SUM of INT8 is NUMERIC (DECIMAL): the casts
	// give exact integers back, or fail on an overflow rather than round.
	q := `WITH g AS (SELECT issuer, ` + groupKeys[f.GroupBy] + ` AS k, sum(ai_micros) AS ai,
			sum(compute_seconds) AS cs, count(*) AS n FROM usage_events WHERE ` + cond + ` GROUP BY 1, 2),
		t AS (SELECT issuer, k, ai, cs, n, sum(ai) OVER () AS tai, sum(cs) OVER () AS tcs, sum(n) OVER () AS tn FROM g)
		SELECT issuer, k, ai::INT8, cs::INT8, n::INT8, tai::INT8, tcs::INT8, tn::INT8 FROM t ` + after + `
		ORDER BY ` + l.bytewise("issuer") + `, ` + l.bytewise("k") + ` LIMIT ` + arg(f.Limit+1)
	var page billing.UsagePage
	err := l.tx(ctx, cockroachdb.TxOptions{ReadOnly: true}, func(tx pgx.Tx) error {
		page = billing.UsagePage{}
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r billing.UsageRow
			if err := rows.Scan(&r.Issuer, &r.Key, &r.AIMicros, &r.ComputeSeconds, &r.Events,
				&page.Totals.AIMicros, &page.Totals.ComputeSeconds, &page.Totals.Events); err != nil {
				return err
			}
			page.Rows = append(page.Rows, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(page.Rows) > 0 {
			return nil
		}
		// Past the last group (or none at all): the totals need a statement of their own.
		if err := tx.QueryRow(ctx, `SELECT COALESCE(sum(ai_micros), 0)::INT8, COALESCE(sum(compute_seconds), 0)::INT8,
			count(*) FROM usage_events WHERE `+cond, args[:condArgs]...).
			Scan(&page.Totals.AIMicros, &page.Totals.ComputeSeconds, &page.Totals.Events); err != nil {
			return fmt.Errorf("totals: %w", err)
		}
		return nil
	})
	if err != nil {
		return billing.UsagePage{}, fmt.Errorf("query usage: %w", billing.ClassifyStore(err, transient))
	}
	if len(page.Rows) > f.Limit {
		page.Rows = page.Rows[:f.Limit]
		page.NextCursor = billing.CursorAfter(f.GroupBy, page.Rows[f.Limit-1])
	}
	return page, nil
}

// splitNanos is t in UTC as stored: truncated to the microsecond, which TIMESTAMPTZ keeps, and the
// nanoseconds past it (0 to 999), which at_nanos keeps.
func splitNanos(t time.Time) (time.Time, int64) {
	t = t.UTC()
	ns := t.Nanosecond() % 1000
	return t.Add(-time.Duration(ns)), int64(ns)
}

// bytewise is the SQL for expr compared byte by byte, as billing/sqlite compares text: COLLATE "C" on
// PostgreSQL, whose databases may sort by a locale, and expr itself on CockroachDB, which compares strings
// byte by byte already (and before 22.2 rejects "C").
func (l *Ledger) bytewise(expr string) string {
	if l.srv == cockroachdb.CockroachDB {
		return expr
	}
	return expr + ` COLLATE "C"`
}

// transient reports the database failures that trying again later may mend, for billing.ClassifyStore: a
// database that cannot be reached, a commit whose outcome is unknown, a transaction that kept failing to
// serialize.
func transient(err error) bool {
	switch cockroachdb.Classify(err) {
	case cockroachdb.Unavailable, cockroachdb.Ambiguous, cockroachdb.Retryable:
		return true
	}
	return false
}
