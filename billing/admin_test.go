package billing_test

import (
	"errors"
	"testing"

	"github.com/warren-mesh/warren/billing"
)

func TestEffectiveLimit(t *testing.T) {
	quota := func(ai, compute, sessions int64) *billing.Quota {
		return &billing.Quota{AIMicros: ai, ComputeSeconds: compute, Window: billing.Day, MaxConcurrentSessions: sessions, Revision: 1}
	}
	unlimited := billing.Budget{AIMicros: -1, ComputeSeconds: -1}
	for _, tc := range []struct {
		name         string
		token        billing.Budget
		issuer, user *billing.Quota
		want         billing.Limit
	}{
		{"no quota: the token alone", billing.Budget{AIMicros: 5, ComputeSeconds: 6}, nil, nil,
			billing.Limit{Budget: billing.Budget{AIMicros: 5, ComputeSeconds: 6}, MaxConcurrentSessions: -1}},
		{"issuer quota below the token", billing.Budget{AIMicros: 500, ComputeSeconds: 600}, quota(100, 60, 3), nil,
			billing.Limit{Budget: billing.Budget{AIMicros: 100, ComputeSeconds: 60}, MaxConcurrentSessions: 3}},
		{"token below the issuer quota", billing.Budget{AIMicros: 50, ComputeSeconds: 6}, quota(100, 60, 3), nil,
			billing.Limit{Budget: billing.Budget{AIMicros: 50, ComputeSeconds: 6}, MaxConcurrentSessions: 3}},
		{"mixed per dimension", billing.Budget{AIMicros: 50, ComputeSeconds: 600}, quota(100, 60, 3), nil,
			billing.Limit{Budget: billing.Budget{AIMicros: 50, ComputeSeconds: 60}, MaxConcurrentSessions: 3}},
		{"user override replaces the issuer's, even when higher", billing.Budget{AIMicros: 1000, ComputeSeconds: 1000},
			quota(100, 60, 3), quota(700, 900, 5),
			billing.Limit{Budget: billing.Budget{AIMicros: 700, ComputeSeconds: 900}, MaxConcurrentSessions: 5}},
		{"user override without an issuer quota", billing.Budget{AIMicros: 1000, ComputeSeconds: 10}, nil, quota(700, 900, 1),
			billing.Limit{Budget: billing.Budget{AIMicros: 700, ComputeSeconds: 10}, MaxConcurrentSessions: 1}},
		{"unlimited token takes the quota", unlimited, quota(100, 60, 3), nil,
			billing.Limit{Budget: billing.Budget{AIMicros: 100, ComputeSeconds: 60}, MaxConcurrentSessions: 3}},
		{"unlimited quota keeps the token", billing.Budget{AIMicros: 5, ComputeSeconds: 6}, quota(-1, -1, -1), nil,
			billing.Limit{Budget: billing.Budget{AIMicros: 5, ComputeSeconds: 6}, MaxConcurrentSessions: -1}},
		{"both unlimited stay unlimited", billing.Budget{AIMicros: -7, ComputeSeconds: -1}, quota(-1, -1, -1), nil,
			billing.Limit{Budget: unlimited, MaxConcurrentSessions: -1}},
		{"zero quota allows nothing", billing.Budget{AIMicros: 5, ComputeSeconds: 6}, quota(0, 0, 0), nil,
			billing.Limit{Budget: billing.Budget{}, MaxConcurrentSessions: 0}},
		{"zero token allows nothing", billing.Budget{}, quota(100, 60, 3), nil,
			billing.Limit{Budget: billing.Budget{}, MaxConcurrentSessions: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := billing.EffectiveLimit(tc.token, tc.issuer, tc.user); got != tc.want {
				t.Fatalf("EffectiveLimit = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestUsageCursorRoundTrip(t *testing.T) {
	row := billing.UsageRow{Issuer: "acme", Key: "ünïcode, \"quoted\""}
	c := billing.CursorAfter(billing.GroupByModel, row)
	got, err := billing.ParseUsageCursor(c, billing.GroupByModel)
	if err != nil || got.Issuer != row.Issuer || got.Key != row.Key || got.GroupBy != billing.GroupByModel {
		t.Fatalf("ParseUsageCursor = %+v, %v", got, err)
	}
	if _, err := billing.ParseUsageCursor(c, billing.GroupByUser); !errors.Is(err, billing.ErrInvalid) {
		t.Fatalf("cursor of another grouping: %v, want ErrInvalid", err)
	}
}

func TestPricesMatch(t *testing.T) {
	ps := billing.DefaultPrices()
	for _, tc := range []struct{ model, want string }{
		{"claude-opus-4-5-20251101", "claude-opus-4-5"},
		{"claude-opus-4-1", "claude-opus"},
		{"gpt-5", ""},
	} {
		name, p := ps.Match(tc.model)
		if name != tc.want || p != ps.Lookup(tc.model) {
			t.Errorf("Match(%q) = %q, %+v; want %q and Lookup's price", tc.model, name, p, tc.want)
		}
	}
}
