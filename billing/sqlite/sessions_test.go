package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/billing/sessiontest"
	"github.com/warren-mesh/warren/billing/sqlite"
)

func TestSessionsContract(t *testing.T) {
	sessiontest.Run(t, func(t *testing.T, clock *ledgertest.Clock) billing.Sessions {
		return open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db"), Now: clock.Now}).Sessions()
	})
}

// Two ledgers on one file stand for two edges in separate processes admitting one user's sessions.
func TestSessionsRaceTwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	clock := ledgertest.NewClock(sessiontest.Start)
	sessiontest.Race(t, open(t, sqlite.Config{Path: path, Now: clock.Now}).Sessions(), open(t, sqlite.Config{Path: path, Now: clock.Now}).Sessions())
}
