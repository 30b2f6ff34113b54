package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/warren-mesh/warren/internal/previews"
	"github.com/warren-mesh/warren/internal/previews/previewstest"
	"github.com/warren-mesh/warren/internal/previews/sqlite"
)

func TestContract(t *testing.T) {
	previewstest.Run(t, func(t *testing.T) previews.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "placements.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestOpenRejectsNoPath(t *testing.T) {
	if _, err := sqlite.Open(context.Background(), ""); err == nil {
		t.Fatal("Open without a path succeeded")
	}
}
