package billing

import (
	"fmt"
	"time"
)

// Valid reports whether w is one of the known windows.
func (w Window) Valid() bool {
	switch w {
	case Hour, Day, Week, Month, Lifetime:
		return true
	}
	return false
}

// WindowStart returns the start, in UTC, of the window of kind w that contains t: the hour, the day, the week
// beginning on Monday, or the month. Lifetime and unknown windows have the zero start.
func WindowStart(w Window, t time.Time) time.Time {
	t = t.UTC()
	y, m, d := t.Date()
	switch w {
	case Hour:
		return t.Truncate(time.Hour)
	case Day:
		return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	case Week:
		sinceMonday := (int(t.Weekday()) + 6) % 7
		return time.Date(y, m, d-sinceMonday, 0, 0, 0, 0, time.UTC)
	case Month:
		return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}

// CurrentWindowStart returns the start of the window of kind w anchored at anchor (a token's windowStart)
// that contains now: anchor advanced by whole periods — an hour, a day, a week, or a calendar month (the
// anchor's day of month, clamped to the month's last day, at the anchor's time of day) — as far as it stays
// at or before now. Before the anchor it is the anchor itself (the first window has not begun; usage then
// counts against the first window). Lifetime and unknown windows return anchor unchanged.
func CurrentWindowStart(w Window, anchor, now time.Time) time.Time {
	start, _ := windowAt(w, anchor, now)
	return start
}

// NextWindowStart returns when the window of kind w anchored at anchor that contains now ends: the start
// of the next one (before the anchor, the end of the first window). Lifetime and unknown windows never
// end: the zero time.
func NextWindowStart(w Window, anchor, now time.Time) time.Time {
	_, next := windowAt(w, anchor, now)
	return next
}

// windowAt returns the start of the window containing now (CurrentWindowStart) and of the next one.
func windowAt(w Window, anchor, now time.Time) (start, next time.Time) {
	anchor, now = anchor.UTC(), now.UTC()
	var period time.Duration
	switch w {
	case Hour:
		period = time.Hour
	case Day:
		period = 24 * time.Hour
	case Week:
		period = 7 * 24 * time.Hour
	case Month:
		if !now.After(anchor) {
			return anchor, addMonths(anchor, 1)
		}
		y1, m1, _ := anchor.Date()
		y2, m2, _ := now.Date()
		k := (y2-y1)*12 + int(m2-m1)
		for k > 0 && addMonths(anchor, k).After(now) {
			k--
		}
		return addMonths(anchor, k), addMonths(anchor, k+1)
	default:
		return anchor, time.Time{}
	}
	if !now.After(anchor) {
		return anchor, anchor.Add(period)
	}
	start = anchor.Add(now.Sub(anchor) / period * period)
	return start, start.Add(period)
}

// addMonths adds k calendar months to t, clamping the day to the target month's last day (Jan 31 + 1 month is
// the last day of February, not March 3rd).
func addMonths(t time.Time, k int) time.Time {
	y, m, d := t.Date()
	first := time.Date(y, m+time.Month(k), 1, t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
	last := first.AddDate(0, 1, -1).Day()
	return first.AddDate(0, 0, min(d, last)-1)
}

// String names the account in errors and logs, the same way in billing and in every adapter:
// "issuer/user lifetime", else "issuer/user window from start" with the start in UTC to the second
// (RFC 3339).
func (a Account) String() string {
	if a.Window == Lifetime {
		return fmt.Sprintf("%s/%s lifetime", a.Issuer, a.User)
	}
	return fmt.Sprintf("%s/%s %s from %s", a.Issuer, a.User, a.Window, a.WindowStart.UTC().Format(time.RFC3339))
}

// Validate reports, wrapping ErrInvalid, an account without issuer or user, with an unknown window, without a
// start for a bounded window, or with a start for Lifetime. Starts are not required to be aligned: a
// customer may mint tokens whose day begins at the user's local midnight.
func (a Account) Validate() error {
	switch {
	case a.Issuer == "":
		return fmt.Errorf("account without issuer: %w", ErrInvalid)
	case a.User == "":
		return fmt.Errorf("account %s without user: %w", a.Issuer, ErrInvalid)
	case !a.Window.Valid():
		return fmt.Errorf("account %s/%s: unknown window %q: %w", a.Issuer, a.User, a.Window, ErrInvalid)
	case a.Window == Lifetime && !a.WindowStart.IsZero():
		return fmt.Errorf("account %s/%s: lifetime window with a start: %w", a.Issuer, a.User, ErrInvalid)
	case a.Window != Lifetime && a.WindowStart.IsZero():
		return fmt.Errorf("account %s/%s: %s window without a start: %w", a.Issuer, a.User, a.Window, ErrInvalid)
	}
	return nil
}

// Validate reports, wrapping ErrInvalid, an event without key, with an invalid account, an unknown kind or a
// negative amount.
func (ev UsageEvent) Validate() error {
	if ev.Key == "" {
		return fmt.Errorf("usage event without key: %w", ErrInvalid)
	}
	if err := ev.Account.Validate(); err != nil {
		return fmt.Errorf("usage event %s: %w", ev.Key, err)
	}
	switch {
	case ev.Kind != KindAI && ev.Kind != KindCompute:
		return fmt.Errorf("usage event %s: unknown kind %q: %w", ev.Key, ev.Kind, ErrInvalid)
	case ev.AIMicros < 0 || ev.ComputeSeconds < 0:
		return fmt.Errorf("usage event %s: negative amount (ai %d, compute %d): %w", ev.Key, ev.AIMicros, ev.ComputeSeconds, ErrInvalid)
	}
	return nil
}
