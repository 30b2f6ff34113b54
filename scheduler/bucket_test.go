package scheduler

import (
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
)

func TestBucketParts(t *testing.T) {
	anchor := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // hour windows start on the hour
	hour := billing.Account{Issuer: "iss", User: "u", Window: billing.Hour}
	life := billing.Account{Issuer: "iss", User: "u", Window: billing.Lifetime}
	at := func(h, m, s int, ns int) time.Time { return time.Date(2030, 1, 1, h, m, s, ns, time.UTC) }
	type want struct {
		windowStart time.Time
		seconds     int64
		suffix      string
	}
	for _, tt := range []struct {
		name   string
		lo, hi time.Time
		acct   billing.Account
		anchor time.Time
		want   []want
	}{
		{"inside a window", at(5, 10, 0, 0), at(5, 10, 10, 0), hour, anchor, []want{{at(5, 0, 0, 0), 10, ""}}},
		{"started seconds", at(5, 10, 0, 0), at(5, 10, 3, 1), hour, anchor, []want{{at(5, 0, 0, 0), 4, ""}}},
		{"ends on the boundary", at(5, 59, 50, 0), at(6, 0, 0, 0), hour, anchor, []want{{at(5, 0, 0, 0), 10, ""}}},
		{"starts on the boundary", at(6, 0, 0, 0), at(6, 0, 10, 0), hour, anchor, []want{{at(6, 0, 0, 0), 10, ""}}},
		{"straddles the boundary", at(5, 59, 57, 0), at(6, 0, 7, 0), hour, anchor,
			[]want{{at(5, 0, 0, 0), 3, ""}, {at(6, 0, 0, 0), 7, "w"}}},
		{"straddles by a nanosecond", at(5, 59, 55, 0), at(6, 0, 0, 1), hour, anchor,
			[]want{{at(5, 0, 0, 0), 5, ""}, {at(6, 0, 0, 0), 1, "w"}}},
		{"no anchor", at(5, 59, 57, 0), at(6, 0, 7, 0), hour, time.Time{}, []want{{time.Time{}, 10, ""}}},
		{"lifetime", at(5, 59, 57, 0), at(6, 0, 7, 0), life, anchor, []want{{time.Time{}, 10, ""}}},
		{"empty", at(5, 0, 0, 0), at(5, 0, 0, 0), hour, anchor, nil},
	} {
		got := bucketParts(tt.lo, tt.hi, tt.acct, tt.anchor)
		if len(got) != len(tt.want) {
			t.Fatalf("%s: %d parts %+v, want %d", tt.name, len(got), got, len(tt.want))
		}
		var total int64
		for i, w := range tt.want {
			g := got[i]
			if !g.acct.WindowStart.Equal(w.windowStart) || g.seconds != w.seconds || g.suffix != w.suffix {
				t.Errorf("%s: part %d = {%v %d %q}, want {%v %d %q}", tt.name, i, g.acct.WindowStart, g.seconds, g.suffix, w.windowStart, w.seconds, w.suffix)
			}
			total += g.seconds
		}
		if d := tt.hi.Sub(tt.lo); total < int64(d/time.Second) {
			t.Errorf("%s: %d s charged for %v", tt.name, total, d)
		}
	}
}
