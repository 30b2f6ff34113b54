package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
)

// reclaimBatch is how many objects a reclaim deletes between two reads of the fence.
const reclaimBatch = 64

// ReclaimTimeout bounds a reclaim (Snapshot under the stored-bytes limit); for as long after Fence, the
// fencing runner writes again the stored blobs it reuses (Fence).
const ReclaimTimeout = 2 * time.Minute

// reclaimed is what a reclaim left under the prefix.
type reclaimed struct {
	// stored is every byte the prefix holds afterwards.
	stored int64
	// pinned is the part of stored that a snapshot committed now would not free: everything but the
	// latest manifest and the blobs only it (or the protected set) names. pinnedBlobs are the hashes of
	// the blobs in pinned.
	pinned      int64
	pinnedBlobs map[string]struct{}
	st          GCStats
	// spared are the keys of the blobs left alone as written since the fence was raised (by the store's
	// clock, to its precision).
	spared map[string]struct{}
}

// reclaim is the collection a snapshot at epoch runs when it would take the stored bytes past the limit
// (Config.StoredBytesLimit), so that what the user deleted stops counting at once rather than after the
// grace period. It keeps the latest snapshot, every manifest newer than it (a commit in progress
// elsewhere) and the blobs they or protect (the hashes the caller's own snapshot relies on) name, and
// deletes every other manifest and blob, whatever its age.
//
// What makes that safe without the grace period is the fence (fence.go), raised to epoch first:
//   - a snapshot of an older epoch commits only if it checked the fence before it was raised, hence
//     wrote its manifest before reclaim lists, which then keeps it (it is newer than latest, or latest);
//   - a snapshot of epoch is the caller's own, run one at a time with this;
//   - a runner of a newer epoch raises the fence before it restores, and reclaim reads the fence again
//     before each batch of deletions and stops once it moved; for ReclaimTimeout, which bounds a
//     reclaim, that runner reuses no stored blob written before its fence but writes it again (Fence),
//     and a blob written since the fence was raised (by the store's clock, to its precision) is left
//     alone. A renewed blob is also looked at again after the commit (checkRenewed).
//
// Called with s.mu held.
func (s *Snapshotter) reclaim(ctx context.Context, epoch int64, protect map[string]struct{}) (reclaimed, error) {
	ctx, cancel := context.WithTimeout(ctx, ReclaimTimeout)
	defer cancel()
	start := s.cfg.Now()
	cutoff, err := s.raiseFence(ctx, epoch)
	if err != nil {
		return reclaimed{}, err
	}
	latest, _, found, err := s.readLatest(ctx)
	if err != nil {
		return reclaimed{}, err
	}
	if found && latest.Epoch > epoch {
		return reclaimed{}, fmt.Errorf("%w: latest is %d-%d", ErrFenced, latest.Epoch, latest.Seq)
	}
	var (
		rc                 reclaimed
		kept, dropped, bls []listed
	)
	base := s.cfg.Prefix + "/"
	for o, err := range s.cfg.Store.List(ctx, base) {
		if err != nil {
			return reclaimed{}, err
		}
		rc.stored += o.Size
		rest := strings.TrimPrefix(o.Key, base)
		if name, ok := strings.CutPrefix(rest, "manifests/"); ok {
			if e, q, ok := parseManifestName(name); ok {
				m := listed{Object: o, epoch: e, seq: q}
				if !found || o.Key == latest.Manifest || e > latest.Epoch || e == latest.Epoch && q > latest.Seq {
					kept = append(kept, m)
				} else {
					dropped = append(dropped, m)
				}
			}
		} else if sha, ok := strings.CutPrefix(rest, "blobs/"); ok && isSHA256(sha) {
			bls = append(bls, listed{Object: o})
		}
	}
	rc.st.Manifests, rc.st.Blobs, rc.st.ManifestsKept = len(kept)+len(dropped), len(bls), len(kept)

	// Mark: the latest manifest's blobs may go once a newer snapshot is latest; the others' stay.
	ofLatest, pinned := make(map[string]struct{}), make(map[string]struct{})
	var latestSize int64
	for _, m := range kept {
		man, err := s.readManifest(ctx, m.Key)
		if errors.Is(err, blob.ErrNotFound) {
			continue // deleted since the listing (a fenced snapshot's manifest)
		}
		if err != nil {
			return reclaimed{}, fmt.Errorf("mark: %w", err)
		}
		into := pinned
		if found && m.Key == latest.Manifest {
			into, latestSize = ofLatest, m.Size
		}
		for _, d := range man.Dirs {
			for _, e := range d.Entries {
				if e.Type == TypeFile {
					into[e.SHA256] = struct{}{}
				}
			}
		}
	}
	var garbage []listed
	sizes := make(map[string]int64, len(bls))
	for _, b := range bls {
		sha := strings.TrimPrefix(b.Key, base+"blobs/")
		_, l := ofLatest[sha]
		_, p := pinned[sha]
		_, o := protect[sha]
		if !l && !p && !o {
			garbage = append(garbage, b)
		} else if !p {
			sizes[sha] = b.Size // the latest's or the caller's: stays only if the next snapshot names it
		}
	}

	err = s.deleteFenced(ctx, epoch, append(dropped, garbage...), len(dropped), cutoff, &rc)
	rc.stored -= rc.st.BytesDeleted
	s.stored.Store(rc.stored)
	rc.st.Duration = s.cfg.Now().Sub(start)
	if err != nil {
		return rc, fmt.Errorf("reclaim: %w", err)
	}
	rc.pinned = rc.stored - latestSize
	for _, n := range sizes {
		rc.pinned -= n
	}
	rc.pinnedBlobs = pinned
	s.cfg.Logger.Info("snapshot reclaim under the stored-bytes limit", "prefix", s.cfg.Prefix, "epoch", epoch,
		"manifests_deleted", rc.st.ManifestsDeleted, "blobs_deleted", rc.st.BlobsDeleted, "bytes_deleted",
		rc.st.BytesDeleted, "stored_bytes", rc.stored, "pinned_bytes", rc.pinned, "duration", rc.st.Duration)
	return rc, nil
}

// deleteFenced deletes objs (the first manifests of them manifests, the rest blobs) in batches, reading
// the fence before each and stopping with ErrFenced once it holds another epoch. Blobs written since
// cutoff (by the store's clock) are left alone; deletion is bounded by Config.MaxDeletes.
func (s *Snapshotter) deleteFenced(ctx context.Context, epoch int64, objs []listed, manifests int, cutoff time.Time, rc *reclaimed) error {
	st := &rc.st
	objs = objs[:min(len(objs), s.cfg.MaxDeletes)]
	for i := 0; i < len(objs); {
		f, _, err := s.readFence(ctx)
		if err != nil {
			return err
		}
		if f.Epoch != epoch {
			return fmt.Errorf("%w: a runner of epoch %d has claimed the sandbox", ErrFenced, f.Epoch)
		}
		// A batch holds manifests or blobs, not both, so that every manifest goes before any blob.
		end := min(i+reclaimBatch, len(objs))
		if i < manifests {
			end = min(end, manifests)
		}
		var at time.Time // manifests older than latest never become latest again: no second look
		if i >= manifests {
			at = cutoff // spare what was written since the fence (to the store's precision: in its second)
		}
		n, bytes, err := s.deleteAll(ctx, objs[i:end], at, func(key string) {
			if rc.spared == nil {
				rc.spared = make(map[string]struct{})
			}
			rc.spared[key] = struct{}{}
		})
		if i < manifests {
			st.ManifestsDeleted += n
		} else {
			st.BlobsDeleted += n
		}
		st.BytesDeleted += bytes
		if err != nil {
			return err
		}
		i = end
	}
	return nil
}
