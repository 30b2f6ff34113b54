package cockroach_test

import (
	"context"
	"testing"

	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/previews"
	"github.com/warren-mesh/warren/internal/previews/cockroach"
	"github.com/warren-mesh/warren/internal/previews/previewstest"
	"github.com/warren-mesh/warren/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	previewstest.Run(t, func(t *testing.T) previews.Store {
		pool, err := cockroachdb.Open(context.Background(), testenv.PostgreSQL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := cockroach.New(context.Background(), pool)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestNewRejectsNoPool(t *testing.T) {
	if _, err := cockroach.New(context.Background(), nil); err == nil {
		t.Fatal("New without a pool succeeded")
	}
}
