package snapshot_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-mesh/warren/runner/snapshot"
)

// Republish makes an older manifest latest again as a newer snapshot naming the same blobs (nothing
// uploaded), restorable like any other, and is fenced like Snapshot: never at an epoch older than latest.
func TestRepublish(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	dir := t.TempDir()
	s, err := snapshot.New(snapshot.Config{Store: store, Prefix: "templates/x/default", Dirs: map[string]string{"workspace": dir}})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a", "one")
	if _, _, err := s.Snapshot(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	write("b", "two")
	if _, _, err := s.Snapshot(ctx, 2); err != nil {
		t.Fatal(err)
	}
	old, err := s.ReadManifest(ctx, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Republish(ctx, old, 1); !errors.Is(err, snapshot.ErrFenced) {
		t.Fatalf("republish below latest: %v", err)
	}
	m, err := s.Republish(ctx, old, 3)
	if err != nil {
		t.Fatal(err)
	}
	latest, ok, err := s.Latest(ctx)
	if err != nil || !ok || latest.Epoch != 3 || latest.Seq != 1 || m.Epoch != 3 {
		t.Fatalf("latest %d-%d %v %v", latest.Epoch, latest.Seq, ok, err)
	}
	into := t.TempDir()
	r, err := snapshot.New(snapshot.Config{Store: store, Prefix: "templates/x/default", Dirs: map[string]string{"workspace": into}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Restore(ctx, latest); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(into, "a")); err != nil || string(b) != "one" {
		t.Fatalf("restored a: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(into, "b")); err == nil {
		t.Fatal("b of snapshot 2 was restored from the republished 1")
	}
	if _, err := s.ReadManifest(ctx, 9, 1); err == nil {
		t.Fatal("read a manifest that does not exist")
	}
}
