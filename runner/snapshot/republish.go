package snapshot

import (
	"context"
	"errors"
	"fmt"
)

// ReadManifest reads and validates the manifest of snapshot epoch-seq from the own region's store
// (blob.ErrNotFound, wrapped, when there is none). Workspace templates (runner/templates) list and roll
// back their versions with it.
func (s *Snapshotter) ReadManifest(ctx context.Context, epoch, seq int64) (Manifest, error) {
	return s.readManifestFrom(ctx, s.regions[0], manifestKey(s.cfg.Prefix, epoch, seq))
}

// Republish commits a copy of m as the snapshot of epoch, fenced like Snapshot (ErrFenced when latest
// holds a newer epoch; nothing of it becomes latest then). m must be a manifest of this Snapshotter's own
// store, whose blobs are there (ReadManifest's): nothing is uploaded. This is how a template rolls back
// to an older version: the old tree becomes the newest version again, by a new manifest naming the same
// blobs, so latest only ever moves forward.
func (s *Snapshotter) Republish(ctx context.Context, m Manifest, epoch int64) (Manifest, error) {
	if epoch < 0 {
		return Manifest{}, fmt.Errorf("republish: negative epoch %d", epoch)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	latest, _, found, err := s.readLatest(ctx)
	if err != nil {
		return Manifest{}, fmt.Errorf("republish: %w", err)
	}
	if found && latest.Epoch > epoch {
		return Manifest{}, fmt.Errorf("republish at epoch %d: %w: latest is %d-%d", epoch, ErrFenced, latest.Epoch, latest.Seq)
	}
	m.Epoch, m.Seq, m.Time, m.Region = epoch, 1, s.cfg.Now().UTC(), s.cfg.Region
	if found && latest.Epoch == epoch {
		m.Seq = latest.Seq + 1
	}
	key, _, err := s.writeManifest(ctx, &m, &uploads{})
	if err != nil {
		return Manifest{}, fmt.Errorf("republish at epoch %d: %w", epoch, err)
	}
	if _, err := s.commit(ctx, m, key); err != nil {
		if errors.Is(err, ErrFenced) {
			if derr := s.cfg.Store.Delete(context.WithoutCancel(ctx), key); derr != nil {
				s.cfg.Logger.Warn("republish: removing fenced manifest", "key", key, "err", derr)
			}
		}
		return Manifest{}, fmt.Errorf("republish %d-%d: %w", m.Epoch, m.Seq, err)
	}
	s.known = nil // the next Snapshot checks the store for what it needs
	s.stored.Store(-1)
	return m, nil
}
