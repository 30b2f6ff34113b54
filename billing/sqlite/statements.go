package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// statements are the ledger's statements on the hot paths (admission, and the model proxy's Reserve and
// Settle before and after every model call), prepared once by New: parsing and planning a statement cost
// more than running it. Transactions use them through sql.Tx.StmtContext, which reuses the statement
// prepared on the transaction's connection.
type statements struct {
	usage, sweep, readHold, quota, reserveUsage, insertHold, settleHold, release, insertEvent, addTotals *sql.Stmt
}

func (st *statements) prepare(ctx context.Context, db *sql.DB) error {
	for _, s := range []struct {
		dst   **sql.Stmt
		name  string
		query string
	}{
		{&st.usage, "usage", usageQuery},
		{&st.sweep, "sweep expired holds", `DELETE FROM holds WHERE expires_at <= ?5 AND (id = ?6 OR
			(issuer = ?1 AND "user" = ?2 AND "window" = ?3 AND window_start = ?4))`},
		{&st.readHold, "read hold", `SELECT issuer, "user", "window", window_start, granted FROM holds WHERE id = ?`},
		{&st.quota, "read quota", `SELECT ai_micros FROM quotas WHERE issuer = ? AND "user" IN (?, '')
			ORDER BY "user" DESC LIMIT 1`},
		{&st.reserveUsage, "read usage", `SELECT
			COALESCE((SELECT ai_micros FROM usage_totals
				WHERE issuer = ?1 AND "user" = ?2 AND "window" = ?3 AND window_start = ?4), 0),
			(SELECT COALESCE(SUM(granted), 0) FROM holds
				WHERE issuer = ?1 AND "user" = ?2 AND "window" = ?3 AND window_start = ?4 AND expires_at > ?5)`},
		{&st.insertHold, "insert hold", `INSERT INTO holds
			(id, issuer, "user", "window", window_start, granted, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`},
		{&st.settleHold, "delete hold", `DELETE FROM holds WHERE id = ? RETURNING issuer, "user", "window", window_start`},
		{&st.release, "release hold", `DELETE FROM holds WHERE id = ?`},
		{&st.insertEvent, "insert event", `INSERT INTO usage_events
			(key, issuer, "user", "window", window_start, kind, model, ai_micros, compute_seconds, at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (key) DO NOTHING`},
		{&st.addTotals, "add to totals", `INSERT INTO usage_totals
			(issuer, "user", "window", window_start, ai_micros, compute_seconds)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (issuer, "user", "window", window_start) DO UPDATE SET
				ai_micros       = ai_micros + excluded.ai_micros,
				compute_seconds = compute_seconds + excluded.compute_seconds`},
	} {
		var err error
		if *s.dst, err = db.PrepareContext(ctx, s.query); err != nil {
			st.close()
			return fmt.Errorf("prepare %s: %w", s.name, err)
		}
	}
	return nil
}

// close closes the statements prepared so far.
func (st *statements) close() {
	for _, s := range []*sql.Stmt{st.usage, st.sweep, st.readHold, st.quota, st.reserveUsage, st.insertHold,
		st.settleHold, st.release, st.insertEvent, st.addTotals} {
		if s != nil {
			_ = s.Close()
		}
	}
}
