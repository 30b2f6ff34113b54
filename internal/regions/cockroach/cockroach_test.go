package cockroach_test

import (
	"context"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/regions"
	"github.com/warren-mesh/warren/internal/regions/cockroach"
	"github.com/warren-mesh/warren/internal/regions/regionstest"
	"github.com/warren-mesh/warren/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	regionstest.Run(t, func(t *testing.T, now func() time.Time) regions.Directory {
		pool, err := cockroachdb.Open(context.Background(), testenv.PostgreSQL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		d, err := cockroach.New(context.Background(), cockroach.Config{Pool: pool, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	if _, err := cockroach.New(context.Background(), cockroach.Config{}); err == nil {
		t.Fatal("New without a pool succeeded")
	}
}
