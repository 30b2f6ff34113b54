package billing_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// Account.String is how billing and both ledgers name an account in errors: a bounded window by its start in
// UTC to the second, whatever the start's zone and sub-second part.
func TestAccountString(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		acct billing.Account
		want string
	}{
		{billing.Account{Issuer: "acme", User: "alice", Window: billing.Lifetime}, "acme/alice lifetime"},
		{billing.Account{Issuer: "acme", User: "alice", Window: billing.Day, WindowStart: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)},
			"acme/alice day from 2026-11-23T00:00:00Z"},
		{billing.Account{Issuer: "acme", User: "bob", Window: billing.Hour, WindowStart: time.Date(2026, 11, 23, 1, 30, 5, 999, paris)},
			"acme/bob hour from 2026-11-23T00:30:05Z"},
		{billing.Account{Issuer: "i", User: "u", Window: billing.Month, WindowStart: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
			"i/u month from 2026-01-01T00:00:00Z"},
	} {
		if got := tc.acct.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
		if got := fmt.Sprint(tc.acct); got != tc.want {
			t.Errorf("%%s = %q, want %q", got, tc.want)
		}
	}
}

func TestQuotaKeyString(t *testing.T) {
	for k, want := range map[billing.QuotaKey]string{
		{Issuer: "acme"}:              "acme",
		{Issuer: "acme", User: "bob"}: "acme/bob",
	} {
		if got := k.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", k, got, want)
		}
	}
}
