package cockroach

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/cockroachdb"
)

var _ billing.Reserver = (*Ledger)(nil)

// Reserve holds up to want microdollars of acct's AI budget under id (billing.Reserver). It runs in one
// serializable transaction, so used + held never exceeds limit however many processes reserve at once: it
// deletes the account's expired holds (and an expired hold named id), returns the granted amount of a live
// hold named id, else grants min(want, limit - used - held) and inserts the hold, expiring ttl from the
// ledger's clock. limit is capped by the user's AI quota as stored now (the override, else the issuer's
// default). The transaction is shared with the process's concurrent Reserve, Settle, Release and Record
// calls (writeBatch), which it grants after in turn against the same totals.
//
// An empty id, an invalid account, want <= 0, ttl <= 0, and an id held for another account wrap
// billing.ErrInvalid; a spent budget wraps billing.ErrBudgetExceeded; database failures wrap
// billing.ErrUnavailable.
func (l *Ledger) Reserve(ctx context.Context, id string, acct billing.Account, limit, want int64, ttl time.Duration) (int64, error) {
	if err := billing.ValidateReserve(id, acct, want, ttl); err != nil {
		return 0, err
	}
	op := &writeOp{waiter: newWaiter(ctx), kind: opReserve, id: id, acct: acct, limit: limit, want: want, ttl: ttl}
	if err := l.write(op); err != nil {
		return 0, fmt.Errorf("reserve hold %s for %s: %w", id, acct, err)
	}
	return op.granted, nil
}

// Settle records ev (idempotent by ev.Key, exactly as Record) and deletes hold id in one transaction
// (billing.Reserver). A hold that is gone does not stop the recording; a hold of another account than
// ev's is refused, recording nothing, as a caller bug.
//
// An empty id, an invalid event and a hold of another account wrap billing.ErrInvalid; database failures
// wrap billing.ErrUnavailable.
func (l *Ledger) Settle(ctx context.Context, id string, ev billing.UsageEvent) error {
	if id == "" {
		return fmt.Errorf("settle: hold without id: %w", billing.ErrInvalid)
	}
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("settle hold %s: %w", id, err)
	}
	if err := l.write(&writeOp{waiter: newWaiter(ctx), kind: opSettle, id: id, ev: ev}); err != nil {
		return fmt.Errorf("settle hold %s with usage event %s: %w", id, ev.Key, err)
	}
	return nil
}

// Release deletes hold id without recording usage (billing.Reserver); a missing hold is not an error. An
// empty id wraps billing.ErrInvalid; database failures wrap billing.ErrUnavailable.
func (l *Ledger) Release(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("release: hold without id: %w", billing.ErrInvalid)
	}
	if err := l.write(&writeOp{waiter: newWaiter(ctx), kind: opRelease, id: id}); err != nil {
		return fmt.Errorf("release hold %s: %w", id, err)
	}
	return nil
}

// Record inserts the event unless its key is already stored and, only if it inserted, adds its amounts to
// the account's totals, all in one transaction. An event without At is stamped with the ledger's clock.
// Invalid events wrap billing.ErrInvalid; database failures wrap billing.ErrUnavailable.
func (l *Ledger) Record(ctx context.Context, ev billing.UsageEvent) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if err := l.write(&writeOp{waiter: newWaiter(ctx), kind: opRecord, ev: ev}); err != nil {
		return fmt.Errorf("record usage event %s: %w", ev.Key, err)
	}
	return nil
}

// A writeOp is one Reserve, Settle, Release or Record waiting for its batch.
type writeOp struct {
	waiter
	kind  opKind
	id    string // hold
	acct  billing.Account
	limit int64
	want  int64
	ttl   time.Duration
	ev    billing.UsageEvent // Settle, Record

	granted int64 // Reserve's answer
	err     error
}

type opKind int

const (
	opReserve opKind = iota
	opSettle
	opRelease
	opRecord
)

// write runs op in the process's next write batch and returns its error, classified.
func (l *Ledger) write(op *writeOp) error {
	if err := l.writes.do(op); err != nil {
		return billing.ClassifyStore(err, nil)
	}
	return billing.ClassifyStore(op.err, nil)
}

// runWrites is the write batcher's run: one serializable transaction for the whole batch, retried as a
// whole. An operation refused on its own (ErrInvalid, ErrBudgetExceeded) changes nothing and leaves the
// others to commit. Every operation is idempotent (by hold id or event key), so an ambiguous commit is
// resolved by running the batch again. A transaction that fails for the database (unreachable, retries
// spent) fails them all; one the database refused for what a call carries (a string PostgreSQL cannot
// store, say) is run again call by call, so that only that call fails.
func (l *Ledger) runWrites(ctx context.Context, batch []*writeOp) {
	var results []writeResult
	err := l.tx(ctx, cockroachdb.TxOptions{Idempotent: true}, func(tx pgx.Tx) error {
		var err error
		results, err = writeBatch(ctx, tx, l.now().UTC(), batch)
		return err
	})
	if callsFault(ctx, err, len(batch)) {
		for _, op := range batch {
			l.runWrites(ctx, []*writeOp{op})
		}
		return
	}
	for i, op := range batch {
		if err != nil {
			op.err = err
		} else {
			op.granted, op.err = results[i].granted, results[i].err
		}
		op.finish()
	}
}

// callsFault reports whether a batch of n calls failed with err for what one of them carries rather than
// for the database, so that running them one by one isolates it.
func callsFault(ctx context.Context, err error, n int) bool {
	return err != nil && n > 1 && ctx.Err() == nil && cockroachdb.Classify(err) == cockroachdb.Other
}

type writeResult struct {
	granted int64
	err     error
}

// acctKey is an account as stored: the same key for accounts billing.Account.Same calls one.
type acctKey struct {
	issuer, user, window string
	start                int64 // Unix seconds of the stored window start
}

func keyOf(a billing.Account) acctKey {
	return acctKey{a.Issuer, a.User, string(a.Window), windowStart(a).Unix()}
}

// storedHold is a hold as writeBatch reads it.
type storedHold struct {
	acct    billing.Account
	granted int64
}

// writeBatch does a batch's operations in tx, in three round trips at most: the settled holds are read; the
// settles, releases and records are written and, in the same pipeline, the reserving accounts' expired
// holds swept and their holds, quotas, totals and live holds read; the granted holds are inserted. The
// writes come first, so the reservations grant against what the batch has settled. Operations of one batch
// are concurrent calls, so any order of them is one the callers may see.
func writeBatch(ctx context.Context, tx pgx.Tx, now time.Time, batch []*writeOp) ([]writeResult, error) {
	results := make([]writeResult, len(batch))

	// Settles: the hold each names must be of the event's account, or the settle does nothing.
	var settleIDs []string
	for _, op := range batch {
		if op.kind == opSettle {
			settleIDs = append(settleIDs, op.id)
		}
	}
	settled := map[string]storedHold{}
	if len(settleIDs) > 0 {
		if err := readHolds(ctx, tx, settleIDs, settled); err != nil {
			return nil, err
		}
	}
	var (
		deletes []string
		events  eventRows
	)
	for i, op := range batch {
		switch op.kind {
		case opSettle:
			if h, ok := settled[op.id]; ok {
				if err := billing.CheckSettleHold(h.acct, op.ev.Account); err != nil {
					results[i].err = err
					continue
				}
				delete(settled, op.id) // a second settle of the hold in this batch finds it gone
				deletes = append(deletes, op.id)
			}
			events.add(op.ev, now)
		case opRelease:
			deletes = append(deletes, op.id)
		case opRecord:
			events.add(op.ev, now)
		}
	}

	var (
		b        pgx.Batch
		reserves reserveReads
	)
	if len(deletes) > 0 {
		b.Queue(`DELETE FROM holds WHERE id = ANY($1)`, deletes)
	}
	if len(events.key) > 0 {
		events.queue(&b)
	}
	reserves.queue(&b, now, batch)
	if b.Len() > 0 {
		br := tx.SendBatch(ctx, &b)
		err := reserves.read(br, len(deletes) > 0, len(events.key) > 0)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
	}
	if len(reserves.accts) == 0 {
		return results, nil
	}

	// Grant in batch order, each reservation against what the ones before it hold.
	var ins holdRows
	for i, op := range batch {
		if op.kind != opReserve {
			continue
		}
		if h, ok := reserves.holds[op.id]; ok {
			if err := billing.CheckReserveHold(op.acct, h.acct); err != nil {
				results[i].err = err
				continue
			}
			results[i].granted = h.granted // a retried Reserve: the first one's grant stands
			continue
		}
		k := keyOf(op.acct)
		quota, found := reserves.quota(op.acct)
		st := reserves.accts[k]
		g, err := billing.Grant(billing.CapLimit(op.limit, quota, found), op.want, st.used, st.held)
		if err != nil {
			results[i].err = err
			continue
		}
		st.held += g
		reserves.accts[k] = st
		reserves.holds[op.id] = storedHold{acct: op.acct, granted: g}
		ins.add(op.id, op.acct, g, now.Add(op.ttl))
		results[i].granted = g
	}
	if len(ins.id) > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO holds
			(id, issuer, "user", "window", window_start, granted, expires_at)
			SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TIMESTAMPTZ[], $6::INT8[],
				$7::TIMESTAMPTZ[])`,
			ins.id, ins.issuer, ins.user, ins.window, ins.start, ins.granted, ins.expires); err != nil {
			return nil, fmt.Errorf("insert holds: %w", err)
		}
	}
	return results, nil
}

// holdsSQL reads the holds named by the array $1, live or expired.
const holdsSQL = `SELECT id, issuer, "user", "window", window_start, granted FROM holds WHERE id = ANY($1)`

// readHolds reads the holds named ids, live or expired, into into.
func readHolds(ctx context.Context, tx pgx.Tx, ids []string, into map[string]storedHold) error {
	rows, err := tx.Query(ctx, holdsSQL, ids)
	if err != nil {
		return fmt.Errorf("read holds: %w", err)
	}
	if err := scanHolds(rows, into); err != nil {
		return fmt.Errorf("read holds: %w", err)
	}
	return nil
}

func scanHolds(rows pgx.Rows, into map[string]storedHold) error {
	defer rows.Close()
	for rows.Next() {
		var (
			id, window string
			h          storedHold
		)
		if err := rows.Scan(&id, &h.acct.Issuer, &h.acct.User, &window, &h.acct.WindowStart, &h.granted); err != nil {
			return err
		}
		h.acct.Window = billing.Window(window)
		into[id] = h
	}
	return rows.Err()
}

// eventRows are the events a batch records, as unnest's columns; a key twice in a batch is recorded once
// (the first; the second counts nothing, as it would in a later transaction).
type eventRows struct {
	seen                                   map[string]bool
	key, issuer, user, window, kind, model []string
	start, at                              []time.Time
	ai, compute, atNanos                   []int64
}

func (e *eventRows) add(ev billing.UsageEvent, now time.Time) {
	if e.seen[ev.Key] {
		return
	}
	if e.seen == nil {
		e.seen = map[string]bool{}
	}
	e.seen[ev.Key] = true
	at := ev.At
	if at.IsZero() {
		at = now
	}
	atMicro, atNanos := splitNanos(at)
	a := ev.Account
	e.key, e.issuer, e.user, e.window = append(e.key, ev.Key), append(e.issuer, a.Issuer), append(e.user, a.User),
		append(e.window, string(a.Window))
	e.start, e.kind, e.model = append(e.start, windowStart(a)), append(e.kind, ev.Kind), append(e.model, ev.Model)
	e.ai, e.compute = append(e.ai, ev.AIMicros), append(e.compute, ev.ComputeSeconds)
	e.at, e.atNanos = append(e.at, atMicro), append(e.atNanos, atNanos)
}

// queue inserts the events whose keys are not stored and adds only those to their accounts' totals, in one
// statement.
func (e *eventRows) queue(b *pgx.Batch) {
	b.Queue(`WITH inserted AS (
		INSERT INTO usage_events
			(key, issuer, "user", "window", window_start, kind, model, ai_micros, compute_seconds, at, at_nanos)
		SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TIMESTAMPTZ[], $6::TEXT[],
			$7::TEXT[], $8::INT8[], $9::INT8[], $10::TIMESTAMPTZ[], $11::INT8[])
		ON CONFLICT (key) DO NOTHING
		RETURNING issuer, "user", "window", window_start, ai_micros, compute_seconds)
	INSERT INTO usage_totals (issuer, "user", "window", window_start, ai_micros, compute_seconds)
	SELECT issuer, "user", "window", window_start, sum(ai_micros)::INT8, sum(compute_seconds)::INT8
		FROM inserted GROUP BY issuer, "user", "window", window_start
	ON CONFLICT (issuer, "user", "window", window_start) DO UPDATE SET
		ai_micros       = usage_totals.ai_micros + excluded.ai_micros,
		compute_seconds = usage_totals.compute_seconds + excluded.compute_seconds`,
		e.key, e.issuer, e.user, e.window, e.start, e.kind, e.model, e.ai, e.compute, e.at, e.atNanos)
}

// holdRows are the holds a batch inserts, as unnest's columns.
type holdRows struct {
	id, issuer, user, window []string
	start, expires           []time.Time
	granted                  []int64
}

func (h *holdRows) add(id string, a billing.Account, granted int64, expires time.Time) {
	h.id, h.issuer, h.user, h.window = append(h.id, id), append(h.issuer, a.Issuer), append(h.user, a.User),
		append(h.window, string(a.Window))
	h.start, h.granted, h.expires = append(h.start, windowStart(a)), append(h.granted, granted), append(h.expires, expires)
}

// accountRows are accounts as unnest's columns (accountsSQL).
type accountRows struct {
	issuer, user, window []string
	start                []time.Time
}

func (r *accountRows) add(a billing.Account) {
	r.issuer, r.user, r.window = append(r.issuer, a.Issuer), append(r.user, a.User), append(r.window, string(a.Window))
	r.start = append(r.start, windowStart(a))
}

// usageSQL reads, for each account of the arrays $1 to $4 (accountRows), its stored key, its totals and the
// sum of its holds unexpired at $5: one statement, so one snapshot of them all.
const usageSQL = `SELECT a.issuer, a."user", a."window", a.window_start,
		COALESCE(t.ai_micros, 0), COALESCE(t.compute_seconds, 0),
		(SELECT COALESCE(sum(h.granted), 0)::INT8 FROM holds AS h
			WHERE h.issuer = a.issuer AND h."user" = a."user" AND h."window" = a."window"
				AND h.window_start = a.window_start AND h.expires_at > $5)
	FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TIMESTAMPTZ[]) AS a(issuer, "user", "window", window_start)
	LEFT JOIN usage_totals AS t ON t.issuer = a.issuer AND t."user" = a."user" AND t."window" = a."window"
		AND t.window_start = a.window_start`

// scanUsage reads usageSQL's rows by account.
func scanUsage(rows pgx.Rows) (map[acctKey]billing.Usage, error) {
	defer rows.Close()
	out := map[acctKey]billing.Usage{}
	for rows.Next() {
		var (
			k     acctKey
			start time.Time
			u     billing.Usage
		)
		err := rows.Scan(&k.issuer, &k.user, &k.window, &start, &u.AIMicros, &u.ComputeSeconds, &u.HeldAIMicros)
		if err != nil {
			return nil, err
		}
		k.start = start.Unix()
		out[k] = u
	}
	return out, rows.Err()
}

// reserveReads is what a batch's reservations read: the holds they name, the quotas of their users and
// their accounts' used and held amounts.
type reserveReads struct {
	ids    []string
	rows   accountRows
	accts  map[acctKey]accountState
	holds  map[string]storedHold
	quotas map[[2]string]int64 // by issuer and user ("" for the issuer's default)
}

type accountState struct{ used, held int64 }

// queue adds to b the reservations' sweep of expired holds (of their accounts, and named by their ids:
// an expired hold named id must not answer as if it were live, and it may belong to another account)
// and their reads.
func (r *reserveReads) queue(b *pgx.Batch, now time.Time, batch []*writeOp) {
	r.accts = map[acctKey]accountState{}
	var issuers, users []string
	for _, op := range batch {
		if op.kind != opReserve {
			continue
		}
		r.ids = append(r.ids, op.id)
		if k := keyOf(op.acct); !hasKey(r.accts, k) {
			r.accts[k] = accountState{}
			r.rows.add(op.acct)
			issuers, users = append(issuers, op.acct.Issuer), append(users, op.acct.User)
		}
	}
	if len(r.ids) == 0 {
		return
	}
	b.Queue(`DELETE FROM holds WHERE expires_at <= $1 AND id = ANY($2)`, now, r.ids)
	b.Queue(`DELETE FROM holds AS h WHERE h.expires_at <= $5 AND EXISTS (
		SELECT 1 FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TIMESTAMPTZ[])
			AS a(issuer, "user", "window", window_start)
		WHERE h.issuer = a.issuer AND h."user" = a."user" AND h."window" = a."window" AND h.window_start = a.window_start)`,
		r.rows.issuer, r.rows.user, r.rows.window, r.rows.start, now)
	b.Queue(holdsSQL, r.ids)
	b.Queue(`SELECT issuer, "user", ai_micros FROM quotas WHERE issuer = ANY($1) AND ("user" = ANY($2) OR "user" = '')`,
		issuers, users)
	b.Queue(usageSQL, r.rows.issuer, r.rows.user, r.rows.window, r.rows.start, now)
}

func hasKey[K comparable, V any](m map[K]V, k K) bool { _, ok := m[k]; return ok }

// read reads the batch's results in the order queued: the settles' delete and insert when there were any,
// then the reservations' sweep and reads.
func (r *reserveReads) read(br pgx.BatchResults, deleted, recorded bool) error {
	if deleted {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("delete holds: %w", err)
		}
	}
	if recorded {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("record usage events: %w", err)
		}
	}
	if len(r.ids) == 0 {
		return nil
	}
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("sweep expired holds: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("read holds: %w", err)
	}
	r.holds = map[string]storedHold{}
	if err := scanHolds(rows, r.holds); err != nil {
		return fmt.Errorf("read holds: %w", err)
	}
	rows, err = br.Query()
	if err != nil {
		return fmt.Errorf("read quotas: %w", err)
	}
	r.quotas = map[[2]string]int64{}
	var (
		key   [2]string
		quota int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&key[0], &key[1], &quota}, func() error {
		r.quotas[key] = quota
		return nil
	}); err != nil {
		return fmt.Errorf("read quotas: %w", err)
	}
	rows, err = br.Query()
	if err != nil {
		return fmt.Errorf("read usage: %w", err)
	}
	usage, err := scanUsage(rows)
	if err != nil {
		return fmt.Errorf("read usage: %w", err)
	}
	for k := range r.accts {
		u := usage[k]
		r.accts[k] = accountState{used: u.AIMicros, held: u.HeldAIMicros}
	}
	return nil
}

// quota is the AI quota that caps a's reservations: the user's override, else the issuer's default.
func (r *reserveReads) quota(a billing.Account) (int64, bool) {
	if q, ok := r.quotas[[2]string{a.Issuer, a.User}]; ok {
		return q, true
	}
	q, ok := r.quotas[[2]string{a.Issuer, ""}]
	return q, ok
}
