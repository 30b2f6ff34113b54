package runner

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	"github.com/warren-mesh/warren/internal/wire"
)

// The runner takes the stored-bytes cap from the newest grant: a snapshot over it is refused (logged with
// resource_exhausted) and the previous one stays latest; a committed snapshot is followed by garbage
// collection, which measures what the sandbox stores for warren_snapshot_stored_bytes.
func TestSnapshotStoredBytesLimitAndMetric(t *testing.T) {
	store, err := blobfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	base := t.TempDir()
	r, err := New(Config{
		Issuer: "acme", User: "alice", Epoch: 1, Listen: "127.0.0.1:0", Key: "k", Insecure: true,
		Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state"),
		Snapshots: store, SnapshotPrefix: "sandboxes/x",
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	// gauge is the stored-bytes gauge as /metrics would report it; ok false when absent.
	gauge := func() (v float64, ok bool) {
		mfs, err := r.metrics.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "warren_snapshot_stored_bytes" {
				return mf.GetMetric()[0].GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	if _, ok := gauge(); ok {
		t.Fatal("warren_snapshot_stored_bytes reported before anything was measured")
	}
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(r.cfg.Workspace, "small"), bytes.Repeat([]byte("s"), 100<<10), 0o644))
	r.grant.Store(&wire.Grant{Issuer: "acme", User: "alice", Limits: &wire.SandboxLimits{StoredBytes: 1 << 20}})
	r.snapshot(ctx, "test")
	first, ok, err := r.snap.Latest(ctx)
	if err != nil || !ok {
		t.Fatalf("first snapshot under the limit: %v, %v\n%s", ok, err, logs.String())
	}
	stored := r.snap.StoredBytes()
	if stored < 100<<10 || stored > 110<<10 {
		t.Fatalf("stored bytes %d after a 100 KiB snapshot", stored)
	}
	if n, ok := gauge(); !ok || int64(n) != stored {
		t.Fatalf("warren_snapshot_stored_bytes = %v, %v; want %d", n, ok, stored)
	}
	if !strings.Contains(logs.String(), "snapshot gc") {
		t.Fatalf("no gc after the first commit:\n%s", logs.String())
	}

	must(os.WriteFile(filepath.Join(r.cfg.Workspace, "big"), bytes.Repeat([]byte("b"), 2<<20), 0o644))
	r.snapshot(ctx, "test")
	latest, _, err := r.snap.Latest(ctx)
	must(err)
	if latest.Seq != first.Seq || !strings.Contains(logs.String(), "code=resource_exhausted") {
		t.Fatalf("snapshot over the limit: latest %d-%d (was %d-%d)\n%s", latest.Epoch, latest.Seq, first.Epoch, first.Seq, logs.String())
	}

	r.grant.Store(&wire.Grant{Issuer: "acme", User: "alice", Limits: &wire.SandboxLimits{StoredBytes: -1}})
	r.snapshot(ctx, "test")
	latest, _, err = r.snap.Latest(ctx)
	must(err)
	if latest.Seq == first.Seq {
		t.Fatalf("unlimited: the snapshot was refused\n%s", logs.String())
	}
	if n, _ := gauge(); n < 2<<20 {
		t.Fatalf("warren_snapshot_stored_bytes = %v after a 2 MiB snapshot", n)
	}
}
