package main

import "time"

// showTime is how every table of the CLI shows a time: UTC, to the second (2006-01-02 15:04:05), the
// form `warren admin` already used; "-" for none.
func showTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.DateTime)
}

// showWireTime shows an RFC 3339 time from the wire as showTime does; what does not parse is shown as it
// came.
func showWireTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		if s == "" {
			return "-"
		}
		return s
	}
	return showTime(t)
}
