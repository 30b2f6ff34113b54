package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/regions"
	"github.com/warren-mesh/warren/internal/regions/regionstest"
	"github.com/warren-mesh/warren/internal/regions/sqlite"
)

func TestContract(t *testing.T) {
	regionstest.Run(t, func(t *testing.T, now func() time.Time) regions.Directory {
		d, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "placements.db"), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	})
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	if _, err := sqlite.New(context.Background(), sqlite.Config{}); err == nil {
		t.Fatal("New without a path succeeded")
	}
}
