package edge

import (
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/token"
)

// TestAccountRollsWithTheClock: a long-lived token's bounded window is the period that contains the edge's
// clock, anchored at its windowStart; lifetime and budget-less tokens are one account forever.
func TestAccountRollsWithTheClock(t *testing.T) {
	anchor := time.Date(2026, 11, 20, 9, 30, 0, 0, time.UTC)
	day := &token.Claims{Issuer: "iss", Subject: "u", HasBudget: true,
		Budget: token.Budget{AIMicros: 10, ComputeSeconds: 5, Window: "day", WindowStart: anchor}}
	for _, tc := range []struct {
		now  time.Time
		want time.Time
	}{
		{anchor.Add(-time.Hour), anchor},
		{anchor.Add(24*time.Hour - time.Nanosecond), anchor},
		{anchor.Add(24 * time.Hour), anchor.Add(24 * time.Hour)},
		{anchor.Add(10*24*time.Hour + time.Minute), anchor.Add(10 * 24 * time.Hour)},
	} {
		acct, b := accountOf(day, tc.now)
		if !acct.WindowStart.Equal(tc.want) || acct.Window != billing.Day || b.AIMicros != 10 || b.ComputeSeconds != 5 {
			t.Errorf("at %s: account %+v budget %+v, want window from %s", tc.now, acct, b, tc.want)
		}
	}
	life := &token.Claims{Issuer: "iss", Subject: "u", HasBudget: true, Budget: token.Budget{AIMicros: 1, Window: "lifetime"}}
	if acct, _ := accountOf(life, anchor.Add(1000*time.Hour)); acct.Window != billing.Lifetime || !acct.WindowStart.IsZero() {
		t.Errorf("lifetime account %+v", acct)
	}
	if acct, b := accountOf(&token.Claims{Issuer: "iss", Subject: "u"}, anchor); acct.Window != billing.Lifetime || b.AIMicros != -1 {
		t.Errorf("budget-less token: %+v %+v", acct, b)
	}
}
