package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/warren-mesh/warren/billing"
)

var _ billing.AdminStore = (*Ledger)(nil)

// PutIssuer registers id or renames it, keeping its creation time (billing.Issuers). Bad names wrap
// billing.ErrInvalid; database failures wrap billing.ErrUnavailable.
func (l *Ledger) PutIssuer(ctx context.Context, id, name string) (billing.Issuer, error) {
	if !billing.ValidName(id) || !billing.ValidIssuerName(name) {
		return billing.Issuer{}, fmt.Errorf("put issuer %q: bad id or name: %w", id, billing.ErrInvalid)
	}
	var iss billing.Issuer
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO issuers (id, name, created) VALUES (?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET name = excluded.name`, id, name, l.now().UTC().Unix()); err != nil {
			return fmt.Errorf("upsert: %w", err)
		}
		var err error
		iss, err = getIssuer(ctx, tx, id)
		return err
	})
	if err != nil {
		return billing.Issuer{}, fmt.Errorf("put issuer %s: %w", id, billing.ClassifyStore(err, nil))
	}
	return iss, nil
}

// GetIssuer returns the registered issuer id with its default quota (billing.Issuers).
func (l *Ledger) GetIssuer(ctx context.Context, id string) (billing.Issuer, error) {
	if !billing.ValidName(id) {
		return billing.Issuer{}, fmt.Errorf("get issuer: bad id: %w", billing.ErrInvalid)
	}
	iss, err := getIssuer(ctx, l.db, id)
	if err != nil {
		return billing.Issuer{}, fmt.Errorf("get issuer %s: %w", id, billing.ClassifyStore(err, nil))
	}
	return iss, nil
}

// ListIssuers returns every registered issuer with its default quota, ordered by id (billing.Issuers).
func (l *Ledger) ListIssuers(ctx context.Context) ([]billing.Issuer, error) {
	rows, err := l.db.QueryContext(ctx, issuerSelect+` ORDER BY i.id`)
	if err != nil {
		return nil, fmt.Errorf("list issuers: %w", billing.ClassifyStore(err, nil))
	}
	defer rows.Close()
	var out []billing.Issuer
	for rows.Next() {
		iss, err := scanIssuer(rows)
		if err != nil {
			return nil, fmt.Errorf("list issuers: %w", billing.ClassifyStore(err, nil))
		}
		out = append(out, iss)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list issuers: %w", billing.ClassifyStore(err, nil))
	}
	return out, nil
}

// SetIssuerDisabled disables or enables issuer id (billing.Issuers).
func (l *Ledger) SetIssuerDisabled(ctx context.Context, id string, disabled bool) (billing.Issuer, error) {
	if !billing.ValidName(id) {
		return billing.Issuer{}, fmt.Errorf("set issuer disabled: bad id: %w", billing.ErrInvalid)
	}
	var iss billing.Issuer
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		if err := issuerRegistered(ctx, tx, id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE issuers SET disabled = ? WHERE id = ?`, disabled, id); err != nil {
			return fmt.Errorf("update: %w", err)
		}
		var err error
		iss, err = getIssuer(ctx, tx, id)
		return err
	})
	if err != nil {
		return billing.Issuer{}, fmt.Errorf("set issuer %s disabled %v: %w", id, disabled, billing.ClassifyStore(err, nil))
	}
	return iss, nil
}

// querier is what both *sql.DB and *sql.Tx offer.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const issuerSelect = `SELECT i.id, i.name, i.created,
	q.ai_micros, q.compute_seconds, q."window", q.max_sessions, q.revision,
	q.max_issuer_sessions, q.connects_per_minute, q.issuer_connects_per_minute, q.prompts_per_minute,
	q.issuer_prompts_per_minute,
	COALESCE(q.max_processes, 0), COALESCE(q.max_memory_bytes, 0), COALESCE(q.cpu_millis, 0), COALESCE(q.max_tmp_bytes, 0),
	COALESCE(q.max_workspace_bytes, 0), COALESCE(q.max_concurrent_execs, 0), COALESCE(q.max_stored_bytes, 0),
	COALESCE(q.max_background_processes, 0), COALESCE(q.max_process_log_bytes, 0), COALESCE(q.max_file_watches, 0), COALESCE(q.max_terminals, 0), COALESCE(q.max_tasks, 0), COALESCE(q.max_preview_urls, 0),
	i.disabled
	FROM issuers i LEFT JOIN quotas q ON q.issuer = i.id AND q."user" = ''`

func getIssuer(ctx context.Context, db querier, id string) (billing.Issuer, error) {
	iss, err := scanIssuer(db.QueryRowContext(ctx, issuerSelect+` WHERE i.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return billing.Issuer{}, fmt.Errorf("issuer %q is not registered: %w", id, billing.ErrNotFound)
	}
	return iss, err
}

func scanIssuer(row interface{ Scan(...any) error }) (billing.Issuer, error) {
	var (
		iss                        billing.Issuer
		created                    int64
		ai, compute, sessions, rev sql.NullInt64
		issuerSessions, connects   sql.NullInt64
		issuerConnects, prompts    sql.NullInt64
		issuerPrompts              sql.NullInt64
		window                     sql.NullString
		sb                         billing.SandboxQuota
	)
	if err := row.Scan(&iss.ID, &iss.Name, &created, &ai, &compute, &window, &sessions, &rev,
		&issuerSessions, &connects, &issuerConnects, &prompts, &issuerPrompts,
		&sb.MaxProcesses, &sb.MaxMemoryBytes, &sb.CPUMillis, &sb.MaxTmpBytes, &sb.MaxWorkspaceBytes, &sb.MaxConcurrentExecs,
		&sb.MaxStoredBytes, &sb.MaxBackgroundProcesses, &sb.MaxProcessLogBytes, &sb.MaxFileWatches, &sb.MaxTerminals, &sb.MaxTasks, &sb.MaxPreviewURLs, &iss.Disabled); err != nil {
		return billing.Issuer{}, err
	}
	iss.Created = time.Unix(created, 0).UTC()
	if rev.Valid {
		iss.Quota = &billing.Quota{AIMicros: ai.Int64, ComputeSeconds: compute.Int64, Window: billing.Window(window.String),
			MaxConcurrentSessions: sessions.Int64, Revision: rev.Int64, MaxIssuerSessions: issuerSessions.Int64,
			ConnectsPerMinute: connects.Int64, IssuerConnectsPerMinute: issuerConnects.Int64, PromptsPerMinute: prompts.Int64,
			IssuerPromptsPerMinute: issuerPrompts.Int64, SandboxQuota: sb}
	}
	return iss, nil
}

// GetQuota returns the quota stored under k (billing.Quotas).
func (l *Ledger) GetQuota(ctx context.Context, k billing.QuotaKey) (billing.Quota, error) {
	if err := k.Validate(); err != nil {
		return billing.Quota{}, fmt.Errorf("get quota: %w", err)
	}
	q, err := getQuota(ctx, l.db, k)
	if err != nil {
		return billing.Quota{}, fmt.Errorf("get quota %s: %w", k, billing.ClassifyStore(err, nil))
	}
	return q, nil
}

// PutQuota stores q under k if k's revision is still expected (billing.Quotas). One immediate transaction
// reads the revision and writes the next, so two writers that read the same revision cannot both succeed,
// in this process or another.
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
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		if err := issuerRegistered(ctx, tx, k.Issuer); err != nil {
			return err
		}
		var current int64
		err := tx.QueryRowContext(ctx, `SELECT revision FROM quotas WHERE issuer = ? AND "user" = ?`, k.Issuer, k.User).Scan(&current)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("read revision: %w", err)
		}
		if current != expected {
			return fmt.Errorf("revision %d is stale, the current one is %d: %w", expected, current, billing.ErrConflict)
		}
		q.Revision = current + 1
		if _, err := tx.ExecContext(ctx, `INSERT INTO quotas
			(issuer, "user", ai_micros, compute_seconds, "window", max_sessions, revision,
				max_issuer_sessions, connects_per_minute, issuer_connects_per_minute, prompts_per_minute,
				issuer_prompts_per_minute,
				max_processes, max_memory_bytes, cpu_millis, max_tmp_bytes, max_workspace_bytes, max_concurrent_execs, max_stored_bytes,
				max_background_processes, max_process_log_bytes, max_file_watches, max_terminals, max_tasks, max_preview_urls)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (issuer, "user") DO UPDATE SET
				ai_micros = excluded.ai_micros, compute_seconds = excluded.compute_seconds, "window" = excluded."window",
				max_sessions = excluded.max_sessions, revision = excluded.revision,
				max_issuer_sessions = excluded.max_issuer_sessions, connects_per_minute = excluded.connects_per_minute,
				issuer_connects_per_minute = excluded.issuer_connects_per_minute, prompts_per_minute = excluded.prompts_per_minute,
				issuer_prompts_per_minute = excluded.issuer_prompts_per_minute,
				max_processes = excluded.max_processes, max_memory_bytes = excluded.max_memory_bytes,
				cpu_millis = excluded.cpu_millis, max_tmp_bytes = excluded.max_tmp_bytes,
				max_workspace_bytes = excluded.max_workspace_bytes, max_concurrent_execs = excluded.max_concurrent_execs,
				max_stored_bytes = excluded.max_stored_bytes,
				max_background_processes = excluded.max_background_processes, max_process_log_bytes = excluded.max_process_log_bytes, max_file_watches = excluded.max_file_watches, max_terminals = excluded.max_terminals, max_tasks = excluded.max_tasks, max_preview_urls = excluded.max_preview_urls`,
			k.Issuer, k.User, q.AIMicros, q.ComputeSeconds, string(q.Window), q.MaxConcurrentSessions, q.Revision,
			q.MaxIssuerSessions, q.ConnectsPerMinute, q.IssuerConnectsPerMinute, q.PromptsPerMinute,
			q.IssuerPromptsPerMinute,
			q.MaxProcesses, q.MaxMemoryBytes, q.CPUMillis, q.MaxTmpBytes, q.MaxWorkspaceBytes, q.MaxConcurrentExecs, q.MaxStoredBytes,
			q.MaxBackgroundProcesses, q.MaxProcessLogBytes, q.MaxFileWatches, q.MaxTerminals, q.MaxTasks, q.MaxPreviewURLs); err != nil {
			return fmt.Errorf("write quota: %w", err)
		}
		return nil
	})
	if err != nil {
		return billing.Quota{}, fmt.Errorf("put quota %s: %w", k, billing.ClassifyStore(err, nil))
	}
	return q, nil
}

// DeleteQuota deletes the quota under k if its revision is expected (billing.Quotas).
func (l *Ledger) DeleteQuota(ctx context.Context, k billing.QuotaKey, expected int64) error {
	if err := k.Validate(); err != nil {
		return fmt.Errorf("delete quota: %w", err)
	}
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		var current int64
		err := tx.QueryRowContext(ctx, `SELECT revision FROM quotas WHERE issuer = ? AND "user" = ?`, k.Issuer, k.User).Scan(&current)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("no quota: %w", billing.ErrNotFound)
		case err != nil:
			return fmt.Errorf("read revision: %w", err)
		case current != expected:
			return fmt.Errorf("revision %d is stale, the current one is %d: %w", expected, current, billing.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM quotas WHERE issuer = ? AND "user" = ?`, k.Issuer, k.User); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete quota %s: %w", k, billing.ClassifyStore(err, nil))
	}
	return nil
}

func getQuota(ctx context.Context, db querier, k billing.QuotaKey) (billing.Quota, error) {
	var q billing.Quota
	err := db.QueryRowContext(ctx, `SELECT ai_micros, compute_seconds, "window", max_sessions, revision,
		max_issuer_sessions, connects_per_minute, issuer_connects_per_minute, prompts_per_minute, issuer_prompts_per_minute,
		max_processes, max_memory_bytes, cpu_millis, max_tmp_bytes, max_workspace_bytes, max_concurrent_execs, max_stored_bytes,
			max_background_processes, max_process_log_bytes, max_file_watches, max_terminals, max_tasks, max_preview_urls
		FROM quotas WHERE issuer = ? AND "user" = ?`, k.Issuer, k.User).
		Scan(&q.AIMicros, &q.ComputeSeconds, &q.Window, &q.MaxConcurrentSessions, &q.Revision,
			&q.MaxIssuerSessions, &q.ConnectsPerMinute, &q.IssuerConnectsPerMinute, &q.PromptsPerMinute,
			&q.IssuerPromptsPerMinute,
			&q.MaxProcesses, &q.MaxMemoryBytes, &q.CPUMillis, &q.MaxTmpBytes, &q.MaxWorkspaceBytes, &q.MaxConcurrentExecs, &q.MaxStoredBytes,
			&q.MaxBackgroundProcesses, &q.MaxProcessLogBytes, &q.MaxFileWatches, &q.MaxTerminals, &q.MaxTasks, &q.MaxPreviewURLs)
	if errors.Is(err, sql.ErrNoRows) {
		return billing.Quota{}, fmt.Errorf("no quota: %w", billing.ErrNotFound)
	}
	return q, err
}

// GetPrice returns the override stored for exactly model (billing.PriceStore).
func (l *Ledger) GetPrice(ctx context.Context, model string) (billing.Price, error) {
	if !billing.ValidName(model) {
		return billing.Price{}, fmt.Errorf("get price: bad model name: %w", billing.ErrInvalid)
	}
	var p billing.Price
	err := l.db.QueryRowContext(ctx, `SELECT input, output, cache_read, cache_creation FROM prices WHERE model = ?`, model).
		Scan(&p.Input, &p.Output, &p.CacheRead, &p.CacheCreation)
	if errors.Is(err, sql.ErrNoRows) {
		return billing.Price{}, fmt.Errorf("get price of %s: no override: %w", model, billing.ErrNotFound)
	}
	if err != nil {
		return billing.Price{}, fmt.Errorf("get price of %s: %w", model, billing.ClassifyStore(err, nil))
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
	if _, err := l.db.ExecContext(ctx, `INSERT INTO prices (model, input, output, cache_read, cache_creation)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (model) DO UPDATE SET input = excluded.input, output = excluded.output,
		cache_read = excluded.cache_read, cache_creation = excluded.cache_creation`,
		model, p.Input, p.Output, p.CacheRead, p.CacheCreation); err != nil {
		return fmt.Errorf("put price of %s: %w", model, billing.ClassifyStore(err, nil))
	}
	return nil
}

// DeletePrice removes model's override (billing.PriceStore).
func (l *Ledger) DeletePrice(ctx context.Context, model string) error {
	if !billing.ValidName(model) {
		return fmt.Errorf("delete price: bad model name: %w", billing.ErrInvalid)
	}
	res, err := l.db.ExecContext(ctx, `DELETE FROM prices WHERE model = ?`, model)
	if err != nil {
		return fmt.Errorf("delete price of %s: %w", model, billing.ClassifyStore(err, nil))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete price of %s: %w", model, billing.ClassifyStore(err, nil))
	} else if n == 0 {
		return fmt.Errorf("delete price of %s: no override: %w", model, billing.ErrNotFound)
	}
	return nil
}

// ListPrices returns every override by model name (billing.PriceStore).
func (l *Ledger) ListPrices(ctx context.Context) (map[string]billing.Price, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT model, input, output, cache_read, cache_creation FROM prices`)
	if err != nil {
		return nil, fmt.Errorf("list prices: %w", billing.ClassifyStore(err, nil))
	}
	defer rows.Close()
	out := map[string]billing.Price{}
	for rows.Next() {
		var (
			m string
			p billing.Price
		)
		if err := rows.Scan(&m, &p.Input, &p.Output, &p.CacheRead, &p.CacheCreation); err != nil {
			return nil, fmt.Errorf("list prices: %w", billing.ClassifyStore(err, nil))
		}
		out[m] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list prices: %w", billing.ClassifyStore(err, nil))
	}
	return out, nil
}

// groupKeys are the SQL expressions of the groupings' keys. A day is the UTC date of the event time.
var groupKeys = map[billing.GroupBy]string{
	billing.GroupByUser:  `"user"`,
	billing.GroupByModel: `model`,
	billing.GroupByDay:   `strftime('%Y-%m-%d', at / 1000000000, 'unixepoch')`,
}

// QueryUsage sums usage events into one page of groups (billing.UsageQuery). The page and the totals come
// from one statement, so they agree with each other; every page sums the whole range again, which SQLite
// does quickly at warren dev's sizes thanks to the by-time indexes.
func (l *Ledger) QueryUsage(ctx context.Context, f billing.UsageFilter) (billing.UsagePage, error) {
	if err := f.Validate(); err != nil {
		return billing.UsagePage{}, fmt.Errorf("query usage: %w", err)
	}
	where := []string{"at >= ?", "at < ?"}
	args := []any{unixNanoSat(f.From), unixNanoSat(f.To)}
	if f.Issuer != "" {
		where, args = append(where, "issuer = ?"), append(args, f.Issuer)
	}
	if f.User != "" {
		where, args = append(where, `"user" = ?`), append(args, f.User)
	}
	cond := strings.Join(where, " AND ")
	groups := `SELECT issuer, ` + groupKeys[f.GroupBy] + ` AS k, SUM(ai_micros) AS ai, SUM(compute_seconds) AS cs,
		COUNT(*) AS n FROM usage_events WHERE ` + cond + ` GROUP BY issuer, k`
	after := ""
	pageArgs := args
	if f.Cursor != "" {
		c, err := billing.ParseUsageCursor(f.Cursor, f.GroupBy)
		if err != nil {
			return billing.UsagePage{}, fmt.Errorf("query usage: %w", err)
		}
		after = `WHERE (issuer, k) > (?, ?)`
		pageArgs = append(append([]any{}, args...), c.Issuer, c.Key)
	}
	// The totals are window sums over every group, taken before the cursor's WHERE (SQLite does not push a
	// WHERE into a subquery with window functions), so they cover the whole range on every page.
	q := `WITH g AS (` + groups + `),
		t AS (SELECT issuer, k, ai, cs, n, SUM(ai) OVER () AS tai, SUM(cs) OVER () AS tcs, SUM(n) OVER () AS tn FROM g)
		SELECT issuer, k, ai, cs, n, tai, tcs, tn FROM t ` + after + ` ORDER BY issuer, k LIMIT ?`
	rows, err := l.db.QueryContext(ctx, q, append(pageArgs, f.Limit+1)...)
	if err != nil {
		return billing.UsagePage{}, fmt.Errorf("query usage: %w", billing.ClassifyStore(err, nil))
	}
	defer rows.Close()
	var page billing.UsagePage
	for rows.Next() {
		var r billing.UsageRow
		if err := rows.Scan(&r.Issuer, &r.Key, &r.AIMicros, &r.ComputeSeconds, &r.Events,
			&page.Totals.AIMicros, &page.Totals.ComputeSeconds, &page.Totals.Events); err != nil {
			return billing.UsagePage{}, fmt.Errorf("query usage: %w", billing.ClassifyStore(err, nil))
		}
		page.Rows = append(page.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return billing.UsagePage{}, fmt.Errorf("query usage: %w", billing.ClassifyStore(err, nil))
	}
	if len(page.Rows) > f.Limit {
		page.Rows = page.Rows[:f.Limit]
		page.NextCursor = billing.CursorAfter(f.GroupBy, page.Rows[f.Limit-1])
	}
	if len(page.Rows) == 0 { // past the last group: the totals need their own statement
		err := l.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(ai_micros), 0), COALESCE(SUM(compute_seconds), 0), COUNT(*)
			FROM usage_events WHERE `+cond, args...).Scan(&page.Totals.AIMicros, &page.Totals.ComputeSeconds, &page.Totals.Events)
		if err != nil {
			return billing.UsagePage{}, fmt.Errorf("query usage totals: %w", billing.ClassifyStore(err, nil))
		}
	}
	return page, nil
}

// Event times are stored as Unix nanoseconds, which cover 1678 to 2262; a range bound outside saturates.
var (
	minNanoTime = time.Unix(0, math.MinInt64)
	maxNanoTime = time.Unix(0, math.MaxInt64)
)

func unixNanoSat(t time.Time) int64 {
	switch {
	case t.Before(minNanoTime):
		return math.MinInt64
	case t.After(maxNanoTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}
