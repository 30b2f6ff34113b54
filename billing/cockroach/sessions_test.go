package cockroach_test

import (
	"context"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/billing/sessiontest"
	"github.com/warren-mesh/warren/internal/testenv"
)

func TestSessionsContract(t *testing.T) {
	skipShort(t)
	sessiontest.Run(t, func(t *testing.T, clock *ledgertest.Clock) billing.Sessions {
		return openSessions(t, testenv.PostgreSQL(t), clock)
	})
}

// Two ledgers, each with a pool of its own, on one database stand for two edges admitting one user's
// sessions.
func TestSessionsRaceTwoProcesses(t *testing.T) {
	dsn := testenv.PostgreSQL(t)
	clock := ledgertest.NewClock(sessiontest.Start)
	sessiontest.Race(t, openSessions(t, dsn, clock), openSessions(t, dsn, clock))
}

// Two ledgers migrating the sessions schema at once both succeed.
func TestSessionsConcurrentMigrate(t *testing.T) {
	dsn := testenv.PostgreSQL(t)
	a, b := open(t, dsn), open(t, dsn)
	errs := make(chan error, 2)
	for _, l := range []*cockroach.Ledger{a, b} {
		go func() {
			_, err := l.Sessions(context.Background())
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// openSessions opens a ledger with a pool of its own on dsn and returns its sessions.
func openSessions(t *testing.T, dsn string, clock *ledgertest.Clock) *cockroach.Sessions {
	t.Helper()
	s, err := open(t, dsn, cockroach.WithClock(clock.Now)).Sessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
