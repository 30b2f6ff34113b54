package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
)

// The fence object (<prefix>/fence) holds the newest epoch that has claimed the sandbox in this store:
// a runner raises it before it restores (Fence), and a collection under the stored-bytes limit raises it
// before it deletes anything (reclaim). No snapshot of an older epoch commits once it is raised, so a
// collector only has to spare the snapshots of its own epoch (run by its own Snapshotter, one at a time)
// and those whose manifests it lists; and a collector finding a newer epoch there stops, since that
// runner's snapshots rely on blobs no manifest names yet (docs/ARCHITECTURE.md#snapshots).
type fence struct {
	Epoch int64 `json:"epoch"`
	// Time changes on every write, so that the object's ETag does (blob.Store.PutIf).
	Time time.Time `json:"time"`
}

// maxFenceSize bounds the fence object: a number and a time.
const maxFenceSize = 256

func fenceKey(prefix string) string { return prefix + "/fence" }

// parseFence decodes the fence object read from the store (untrusted).
func parseFence(data []byte) (fence, error) {
	if len(data) > maxFenceSize {
		return fence{}, fmt.Errorf("%w: fence is %d bytes, the limit is %d", ErrCorrupt, len(data), maxFenceSize)
	}
	var f fence
	if err := decodeStrict(data, &f); err != nil {
		return fence{}, fmt.Errorf("%w: fence: %w", ErrCorrupt, err)
	}
	if f.Epoch < 0 {
		return fence{}, fmt.Errorf("%w: fence at negative epoch %d", ErrCorrupt, f.Epoch)
	}
	return f, nil
}

// readFence reads the own store's fence; etag is "" and the epoch 0 when there is none.
func (s *Snapshotter) readFence(ctx context.Context) (f fence, etag string, err error) {
	data, etag, err := s.cfg.Store.Read(ctx, fenceKey(s.cfg.Prefix))
	if errors.Is(err, blob.ErrNotFound) {
		return fence{}, "", nil
	}
	if err != nil {
		return fence{}, "", fmt.Errorf("read fence: %w", unavailable(ctx, s.regions[0].name, err))
	}
	f, err = parseFence(data)
	return f, etag, err
}

// checkFence refuses a commit at epoch with ErrFenced when the fence holds a newer one.
func (s *Snapshotter) checkFence(ctx context.Context, epoch int64) error {
	f, _, err := s.readFence(ctx)
	if err != nil {
		return err
	}
	if f.Epoch > epoch {
		return fmt.Errorf("%w: a runner of epoch %d has claimed the sandbox", ErrFenced, f.Epoch)
	}
	return nil
}

// Fence raises the own store's fence to epoch, so that no snapshot of an older epoch commits there from
// now on; the runner of epoch calls it before it restores. ErrFenced when the fence or the latest
// snapshot is already of a newer epoch.
//
// A reclaim by an older epoch may still be deleting, as it read the fence before this write: for
// ReclaimTimeout, this Snapshotter reuses no stored blob written before the fence, since such a blob may
// be one of its garbage; it writes it again, and the reclaim spares what was written after the fence.
func (s *Snapshotter) Fence(ctx context.Context, epoch int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, err := s.raiseFence(ctx, epoch)
	if err == nil {
		s.distrustBefore, s.distrustUntil = at, s.cfg.Now().Add(ReclaimTimeout)
	}
	return err
}

// raiseFence writes the fence at epoch (with a fresh time) by compare-and-set and returns the store's
// modification time of what it wrote.
func (s *Snapshotter) raiseFence(ctx context.Context, epoch int64) (time.Time, error) {
	if epoch < 0 {
		return time.Time{}, fmt.Errorf("fence: negative epoch %d", epoch)
	}
	for range commitAttempts {
		f, etag, err := s.readFence(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if f.Epoch > epoch {
			return time.Time{}, fmt.Errorf("fence at epoch %d: %w: a runner of epoch %d has claimed the sandbox", epoch, ErrFenced, f.Epoch)
		}
		latest, _, found, err := s.readLatest(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if found && latest.Epoch > epoch {
			return time.Time{}, fmt.Errorf("fence at epoch %d: %w: latest is %d-%d", epoch, ErrFenced, latest.Epoch, latest.Seq)
		}
		data, err := json.Marshal(fence{Epoch: epoch, Time: s.cfg.Now().UTC()})
		if err != nil {
			return time.Time{}, err
		}
		_, err = s.cfg.Store.PutIf(ctx, fenceKey(s.cfg.Prefix), data, etag)
		if errors.Is(err, blob.ErrPrecondition) {
			continue // another writer raised it meanwhile: read it again
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("write fence: %w", err)
		}
		o, err := s.cfg.Store.Stat(ctx, fenceKey(s.cfg.Prefix))
		if err != nil {
			return time.Time{}, fmt.Errorf("stat fence: %w", err)
		}
		return o.Modified, nil
	}
	return time.Time{}, fmt.Errorf("write fence: changed by other writers %d times in a row: %w", commitAttempts, blob.ErrPrecondition)
}
