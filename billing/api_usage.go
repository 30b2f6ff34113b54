package billing

import (
	"encoding/csv"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warren-mesh/warren/internal/httpx"
)

// usageParams are the query parameters of GET /v1/usage; anything else is refused, so a misspelt filter
// cannot silently widen a report.
var usageParams = []string{"iss", "sub", "from", "to", "group_by", "cursor", "limit"}

// UsageReportRow is one row of GET /v1/usage: the issuer and exactly one of sub, day and model, after
// group_by. Exported for the API's Go clients (internal/tfprovider).
type UsageReportRow struct {
	Issuer         string  `json:"iss"`
	User           *string `json:"sub,omitempty"`
	Day            *string `json:"day,omitempty"`
	Model          *string `json:"model,omitempty"`
	AIMicros       int64   `json:"ai_microdollars"`
	ComputeSeconds int64   `json:"compute_seconds"`
	Events         int64   `json:"events"`
}

// UsageReport is the JSON answer of GET /v1/usage: one page of rows, the totals of all of them, and the
// cursor of the next page ("" on the last).
type UsageReport struct {
	GroupBy    GroupBy          `json:"group_by"`
	From       time.Time        `json:"from"`
	To         time.Time        `json:"to"`
	Rows       []UsageReportRow `json:"rows"`
	Totals     UsageTotals      `json:"totals"`
	NextCursor string           `json:"next_cursor,omitempty"`
}

// usageColumn is the name of the group key's column and JSON field.
func usageColumn(g GroupBy) string {
	if g == GroupByUser {
		return "sub"
	}
	return string(g)
}

func (a *API) usage(w http.ResponseWriter, r *http.Request) error {
	f, err := parseUsageQuery(r)
	if err != nil {
		return err
	}
	if wantsCSV(r) {
		if r.URL.Query().Has("limit") {
			return invalidField("limit", "limit does not apply to a CSV export, which holds every row")
		}
		return a.usageCSV(w, r, f)
	}
	page, err := a.cfg.Store.QueryUsage(r.Context(), f)
	if err != nil {
		return storeError(err, "")
	}
	out := UsageReport{GroupBy: f.GroupBy, From: f.From, To: f.To, Rows: make([]UsageReportRow, 0, len(page.Rows)),
		Totals: page.Totals, NextCursor: page.NextCursor}
	for _, row := range page.Rows {
		ur := UsageReportRow{Issuer: row.Issuer, AIMicros: row.AIMicros, ComputeSeconds: row.ComputeSeconds, Events: row.Events}
		key := row.Key
		switch f.GroupBy {
		case GroupByUser:
			ur.User = &key
		case GroupByDay:
			ur.Day = &key
		case GroupByModel:
			ur.Model = &key
		}
		out.Rows = append(out.Rows, ur)
	}
	return httpx.WriteJSON(w, http.StatusOK, out)
}

// usageCSV streams every row from the cursor on, a page of MaxUsageLimit groups at a time, flushing after
// each: the export is never held in memory whole. A failure before the first byte is an ordinary error
// answer; after it, the connection is aborted so the client sees a broken transfer, never a short file
// that looks complete.
func (a *API) usageCSV(w http.ResponseWriter, r *http.Request, f UsageFilter) error {
	f.Limit = MaxUsageLimit
	page, err := a.cfg.Store.QueryUsage(r.Context(), f)
	if err != nil {
		return storeError(err, "")
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="usage-by-%s.csv"`, f.GroupBy))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	cw := csv.NewWriter(w)
	rc := http.NewResponseController(w)
	_ = cw.Write([]string{"iss", usageColumn(f.GroupBy), "ai_microdollars", "compute_seconds", "events"})
	for {
		for _, row := range page.Rows {
			_ = cw.Write([]string{row.Issuer, row.Key, strconv.FormatInt(row.AIMicros, 10),
				strconv.FormatInt(row.ComputeSeconds, 10), strconv.FormatInt(row.Events, 10)})
		}
		cw.Flush()
		if err := cw.Error(); err != nil {
			return nil // the client went away; there is no one left to answer
		}
		_ = rc.Flush()
		if page.NextCursor == "" {
			return nil
		}
		f.Cursor = page.NextCursor
		if page, err = a.cfg.Store.QueryUsage(r.Context(), f); err != nil {
			if r.Context().Err() == nil { // not merely the client leaving
				a.logger(r).Error("usage export failed midway", "err", err)
			}
			panic(http.ErrAbortHandler)
		}
	}
}

// wantsCSV reports whether the Accept header names text/csv.
func wantsCSV(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/csv" {
				return true
			}
		}
	}
	return false
}

// parseUsageQuery checks GET /v1/usage's parameters, naming the first bad one.
func parseUsageQuery(r *http.Request) (UsageFilter, error) {
	q := r.URL.Query()
	for name, vs := range q {
		if !slices.Contains(usageParams, name) {
			return UsageFilter{}, invalidField(name, "unknown query parameter %q (want %s)", name, strings.Join(usageParams, ", "))
		}
		if len(vs) > 1 {
			return UsageFilter{}, invalidField(name, "%s is given more than once", name)
		}
	}
	f := UsageFilter{Issuer: q.Get("iss"), User: q.Get("sub"), GroupBy: GroupByUser, Cursor: q.Get("cursor"), Limit: DefaultUsageLimit}
	if q.Has("iss") && !ValidName(f.Issuer) {
		return UsageFilter{}, invalidField("iss", "iss must be 1 to %d bytes of UTF-8 without control characters", MaxNameLen)
	}
	// An issuer's API key reports on its own issuer alone: iss defaults to it and may not name another.
	if scope := info(r).keyIssuer; scope != "" {
		if !q.Has("iss") {
			f.Issuer = scope
		} else if f.Issuer != scope {
			return UsageFilter{}, otherIssuer(scope, f.Issuer)
		}
	}
	if q.Has("sub") {
		switch {
		case !ValidName(f.User):
			return UsageFilter{}, invalidField("sub", "sub must be 1 to %d bytes of UTF-8 without control characters", MaxNameLen)
		case f.Issuer == "":
			return UsageFilter{}, invalidField("sub", "sub needs iss: users are named within their issuer")
		}
	}
	var err error
	if f.From, err = parseUsageTime(q, "from"); err != nil {
		return UsageFilter{}, err
	}
	if f.To, err = parseUsageTime(q, "to"); err != nil {
		return UsageFilter{}, err
	}
	if !f.From.Before(f.To) {
		return UsageFilter{}, invalidField("to", "to must be after from")
	}
	if q.Has("group_by") {
		if f.GroupBy = GroupBy(q.Get("group_by")); !f.GroupBy.Valid() {
			return UsageFilter{}, invalidField("group_by", "group_by %q: want user, day or model", q.Get("group_by"))
		}
	}
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > MaxUsageLimit {
			return UsageFilter{}, invalidField("limit", "limit must be an integer from 1 to %d", MaxUsageLimit)
		}
		f.Limit = n
	}
	if f.Cursor != "" { // an empty cursor is the first page
		if _, err := ParseUsageCursor(f.Cursor, f.GroupBy); err != nil {
			return UsageFilter{}, invalidField("cursor", "cursor is not a next_cursor of this query's group_by")
		}
	}
	return f, nil
}

// parseUsageTime reads a required range bound: RFC 3339, or a date meaning its UTC midnight.
func parseUsageTime(q map[string][]string, name string) (time.Time, error) {
	vs := q[name]
	if len(vs) == 0 || vs[0] == "" {
		return time.Time{}, invalidField(name, "%s is required: RFC 3339 (2026-01-02T15:04:05Z) or a date (2026-01-02, UTC)", name)
	}
	if t, err := time.Parse(time.RFC3339Nano, vs[0]); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, vs[0]); err == nil {
		return t, nil
	}
	return time.Time{}, invalidField(name, "%s %q: want RFC 3339 (2026-01-02T15:04:05Z) or a date (2026-01-02, UTC)", name, vs[0])
}
