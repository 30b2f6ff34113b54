package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/testenv"
)

// bench-ledger on both ledgers with a limit the spenders reach: they are refused, and the check after the
// run finds no account overspent (used equals what was settled, within the limit, nothing held).
func TestBenchLedgerChecksLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(*testing.T) string { return "" }},
		{"postgres", func(t *testing.T) string { return testenv.PostgreSQL(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := []string{"-dsn", tc.dsn(t), "-spenders", "20", "-accounts", "2", "-duration", "500ms", "-limit", "300000"}
			if err := runBenchLedger(context.Background(), args, &out, &errb); err != nil {
				t.Fatalf("bench-ledger: %v\n%s%s", err, out.String(), errb.String())
			}
			for _, want := range []string{"0 overspend", "reserve + settle cycles"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			if strings.Contains(out.String(), " 0 refused") {
				t.Errorf("the limit was never reached:\n%s", out.String())
			}
		})
	}
}
