package billing_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/warren-mesh/warren/billing"
)

// ClassifyStore passes the errors that answer a request through untouched, whatever transient says, and
// reports any other as the store failing: unavailable when transient is nil or says so, internal (as it is)
// otherwise.
func TestClassifyStore(t *testing.T) {
	boom := errors.New("boom")
	never := func(error) bool { t.Error("transient asked about an error that answers the request"); return false }
	for _, answer := range []error{
		billing.ErrInvalid, billing.ErrNotFound, billing.ErrConflict, billing.ErrBudgetExceeded,
		billing.ErrConcurrencyLimit, billing.ErrIssuerConcurrencyLimit,
		fmt.Errorf("read hold: %w", billing.ErrInvalid),
	} {
		for _, transient := range []func(error) bool{nil, never} {
			if got := billing.ClassifyStore(answer, transient); got != answer {
				t.Errorf("ClassifyStore(%v) = %v, want it as it is", answer, got)
			}
		}
	}

	wrapped := fmt.Errorf("insert hold: %w", boom)
	for _, tc := range []struct {
		name        string
		transient   func(error) bool
		unavailable bool
	}{
		{"nil: every store failure", nil, true},
		{"transient", func(err error) bool { return errors.Is(err, boom) }, true},
		{"not transient", func(error) bool { return false }, false},
	} {
		got := billing.ClassifyStore(wrapped, tc.transient)
		if !errors.Is(got, boom) {
			t.Errorf("%s: %v lost the store's error", tc.name, got)
		}
		if errors.Is(got, billing.ErrUnavailable) != tc.unavailable {
			t.Errorf("%s: ClassifyStore = %v, unavailable %v, want %v", tc.name, got, !tc.unavailable, tc.unavailable)
		}
		if tc.unavailable && got.Error() != "ledger unavailable: insert hold: boom" {
			t.Errorf("%s: message %q", tc.name, got)
		}
		if !tc.unavailable && got != wrapped {
			t.Errorf("%s: ClassifyStore = %v, want it as it is", tc.name, got)
		}
	}
	if err := billing.ClassifyStore(nil, nil); err != nil {
		t.Errorf("ClassifyStore(nil) = %v", err)
	}
}
