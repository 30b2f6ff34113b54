package runner

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-mesh/warren/internal/blob"
	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/snapshot"
)

// downStore is a region's store that does not answer.
type downStore struct{ blob.Store }

func (downStore) Read(context.Context, string) ([]byte, string, error) {
	return nil, "", blob.ErrUnavailable
}

func (downStore) Get(context.Context, string) (io.ReadCloser, error) { return nil, blob.ErrUnavailable }

func (downStore) Stat(context.Context, string) (blob.Object, error) {
	return blob.Object{}, blob.ErrUnavailable
}

func (downStore) Exists(context.Context, string) (bool, error) { return false, blob.ErrUnavailable }

// A runner started in region b resumes the workspace its predecessor snapshotted in region a, writes its
// own snapshots to b's store alone (recording region b), fences the stale runner of a, and a runner that
// cannot read one region's store does not start, with unavailable naming the region, unless the previous
// epoch's snapshot is in a store it can read. Without other regions the runner records no region, as
// before.
func TestSnapshotResumeAcrossRegions(t *testing.T) {
	ctx := context.Background()
	newStore := func() blob.Store {
		s, err := blobfs.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	stores := map[string]blob.Store{"a": newStore(), "b": newStore()}
	var logs bytes.Buffer
	start := func(region string, epoch int64, others map[string]blob.Store) *Runner {
		t.Helper()
		base := t.TempDir()
		r, err := New(Config{
			Issuer: "acme", User: "alice", Epoch: epoch, Listen: "127.0.0.1:0", Key: "k", Insecure: true,
			Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state"), Region: region,
			Snapshots: stores[region], SnapshotPrefix: "sandboxes/x", SnapshotRegions: others,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	latestIn := func(store blob.Store) []byte {
		t.Helper()
		data, _, err := store.Read(ctx, "sandboxes/x/latest")
		if err != nil {
			t.Fatal(err)
		}
		return data
	}

	ra := start("a", 1, map[string]blob.Store{"b": stores["b"]})
	if err := ra.restore(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ra.cfg.Workspace, "notes.md"), []byte("written in a"), 0o644); err != nil {
		t.Fatal(err)
	}
	ra.snapshot(ctx, "test")
	if !bytes.Contains(latestIn(stores["a"]), []byte(`"region":"a"`)) {
		t.Fatalf("a's latest does not record region a: %s\n%s", latestIn(stores["a"]), logs.String())
	}

	rb := start("b", 2, map[string]blob.Store{"a": stores["a"]})
	if err := rb.restore(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(rb.cfg.Workspace, "notes.md")); err != nil || string(got) != "written in a" {
		t.Fatalf("resumed in b: %q, %v", got, err)
	}
	rb.snapshot(ctx, "test")
	if !bytes.Contains(latestIn(stores["b"]), []byte(`"region":"b"`)) {
		t.Fatalf("b's latest does not record region b: %s\n%s", latestIn(stores["b"]), logs.String())
	}

	// The runner of a, now stale, is refused and stops.
	var cause error
	ra.stop = func(c error) { cause = c }
	ra.snapshot(ctx, "test")
	if !errors.Is(cause, ErrFencedOff) {
		t.Fatalf("stale runner in a not fenced off:\n%s", logs.String())
	}

	// b's store does not answer: a new runner in a does not start.
	rc := start("a", 3, map[string]blob.Store{"b": downStore{stores["b"]}})
	err := rc.restore(ctx)
	var ru *snapshot.RegionUnavailableError
	if !errors.As(err, &ru) || ru.Region != "b" || wire.CodeOf(err) != wire.Unavailable {
		t.Fatalf("restore with b down = %v, want unavailable naming region b", err)
	}

	// a's store does not answer, but b holds epoch 2's snapshot: the runner of epoch 3 in b can tell
	// that nothing in a is newer, and starts.
	rd := start("b", 3, map[string]blob.Store{"a": downStore{stores["a"]}})
	if err := rd.restore(ctx); err != nil {
		t.Fatalf("restore in b of epoch 2's snapshot with a down: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(rd.cfg.Workspace, "notes.md")); err != nil || string(got) != "written in a" {
		t.Fatalf("resumed in b with a down: %q, %v", got, err)
	}

	// One region: nothing recorded.
	single := map[string]blob.Store{"a": newStore()}
	stores = single
	r1 := start("a", 1, nil)
	r1.snapshot(ctx, "test")
	if bytes.Contains(latestIn(single["a"]), []byte("region")) {
		t.Fatalf("a single-region runner records a region: %s", latestIn(single["a"]))
	}
}
