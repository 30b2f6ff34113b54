package cockroach_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

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

// Two ledgers migrating the sessions schema at once (New migrates it) both succeed.
func TestSessionsConcurrentMigrate(t *testing.T) {
	dsn := testenv.PostgreSQL(t)
	pools := []*pgxpool.Pool{openPool(t, dsn), openPool(t, dsn)}
	errs := make(chan error, len(pools))
	for _, pool := range pools {
		go func() {
			_, err := cockroach.New(context.Background(), cockroach.Config{Pool: pool})
			errs <- err
		}()
	}
	for range pools {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// openSessions opens a ledger with a pool of its own on dsn and returns its sessions.
func openSessions(t *testing.T, dsn string, clock *ledgertest.Clock) *cockroach.Sessions {
	t.Helper()
	return open(t, dsn, cockroach.Config{Now: clock.Now}).Sessions()
}
