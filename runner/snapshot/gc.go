package snapshot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
)

// Garbage collection defaults (Config.Retention, Config.Grace, Config.GCEvery, Config.MaxDeletes).
const (
	DefaultRetention  = 5
	DefaultGrace      = time.Hour
	DefaultGCEvery    = 10 * time.Minute
	DefaultMaxDeletes = 10000
)

// GCStats describes one Collect.
type GCStats struct {
	// Manifests and Blobs count what the store held under the prefix; ManifestsKept the manifests whose
	// blobs were marked (the newest Retention, every one younger than Grace and the latest).
	Manifests, ManifestsKept, Blobs int
	// ManifestsDeleted, BlobsDeleted and BytesDeleted count what was removed.
	ManifestsDeleted, BlobsDeleted int
	BytesDeleted                   int64
	// StoredBytes is what the prefix holds afterwards (every object, not only blobs).
	StoredBytes int64
	Duration    time.Duration
}

// Collect removes what no kept snapshot needs, mark and sweep under the prefix:
//
//   - kept manifests: the Retention newest by (epoch, seq), every manifest younger than Grace, and the
//     one latest names; the others are deleted;
//   - blobs referenced by no kept manifest are deleted once older than Grace.
//
// Ages are taken against the time Collect starts, before it lists, by the store's modification times.
// That makes it safe against a snapshot running meanwhile in any process: a snapshot only uses blobs
// written after its start or, when already stored, written within Grace/2 before (an older one is written
// again, which renews it), and writes its manifest within Grace/2 of its start (Snapshot refuses after);
// so a blob it uses can only be old enough to delete once its manifest already exists, and a manifest
// that exists when Collect lists is young or latest, hence kept and marked.
//
// A kept manifest that cannot be read or parsed stops Collect before anything is deleted. Deletion is
// bounded by Config.MaxDeletes and ctx; manifests go first, so no manifest is left naming a deleted blob.
// Collect runs one at a time with Snapshot and Restore.
func (s *Snapshotter) Collect(ctx context.Context) (GCStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.collectGarbage(ctx)
	s.lastGC = s.cfg.Now()
	if err != nil {
		s.cfg.Logger.Warn("snapshot gc failed", "prefix", s.cfg.Prefix, "err", err)
		return st, fmt.Errorf("snapshot gc %s: %w", s.cfg.Prefix, err)
	}
	s.cfg.Logger.Info("snapshot gc", "prefix", s.cfg.Prefix, "manifests", st.Manifests, "manifests_kept", st.ManifestsKept,
		"manifests_deleted", st.ManifestsDeleted, "blobs", st.Blobs, "blobs_deleted", st.BlobsDeleted,
		"bytes_deleted", st.BytesDeleted, "stored_bytes", st.StoredBytes, "duration", st.Duration)
	return st, nil
}

// CollectIfDue runs Collect when none has run in this Snapshotter for Config.GCEvery (or ever), and
// reports whether it ran.
func (s *Snapshotter) CollectIfDue(ctx context.Context) (GCStats, bool, error) {
	s.mu.Lock()
	due := s.lastGC.IsZero() || s.cfg.Now().Sub(s.lastGC) >= s.cfg.GCEvery
	s.mu.Unlock()
	if !due {
		return GCStats{}, false, nil
	}
	st, err := s.Collect(ctx)
	return st, true, err
}

// StoredBytes is what the prefix holds in the store as this Snapshotter last measured it (by Collect, or
// by a Snapshot under a stored-bytes limit) plus what it wrote since; -1 before the first measure.
func (s *Snapshotter) StoredBytes() int64 { return s.stored.Load() }

type listed struct {
	blob.Object
	epoch, seq int64 // manifests
}

func (s *Snapshotter) collectGarbage(ctx context.Context) (GCStats, error) {
	var st GCStats
	start := s.cfg.Now()
	cutoff := start.Add(-s.cfg.Grace)
	base := s.cfg.Prefix + "/"
	var (
		manifests, blobs []listed
		total            int64
	)
	for o, err := range s.cfg.Store.List(ctx, base) {
		if err != nil {
			return st, err
		}
		total += o.Size
		rest := strings.TrimPrefix(o.Key, base)
		if name, ok := strings.CutPrefix(rest, "manifests/"); ok {
			if epoch, seq, ok := parseManifestName(name); ok {
				manifests = append(manifests, listed{Object: o, epoch: epoch, seq: seq})
			}
		} else if sha, ok := strings.CutPrefix(rest, "blobs/"); ok && isSHA256(sha) {
			blobs = append(blobs, listed{Object: o})
		}
		// Anything else (latest, unknown names) is counted and left alone.
	}
	st.Manifests, st.Blobs = len(manifests), len(blobs)

	latest, _, found, err := s.readLatest(ctx)
	if err != nil {
		return st, err
	}
	slices.SortFunc(manifests, func(a, b listed) int { // newest first
		if a.epoch != b.epoch {
			return cmp.Compare(b.epoch, a.epoch)
		}
		return cmp.Compare(b.seq, a.seq)
	})
	var kept, dropped []listed
	for i, m := range manifests {
		if i < s.cfg.Retention || m.Modified.After(cutoff) || found && m.Key == latest.Manifest {
			kept = append(kept, m)
		} else {
			dropped = append(dropped, m)
		}
	}
	st.ManifestsKept = len(kept)

	// Mark: everything a kept manifest names.
	marked := make(map[string]struct{})
	for _, m := range kept {
		man, err := s.readManifest(ctx, m.Key)
		if errors.Is(err, blob.ErrNotFound) {
			continue // deleted since the listing (a fenced snapshot's manifest)
		}
		if err != nil {
			return st, fmt.Errorf("mark: %w", err)
		}
		for _, d := range man.Dirs {
			for _, e := range d.Entries {
				if e.Type == TypeFile {
					marked[blobKey(s.cfg.Prefix, e.SHA256)] = struct{}{}
				}
			}
		}
	}

	// Sweep: manifests, then blobs.
	var garbage []listed
	for _, b := range blobs {
		if _, ok := marked[b.Key]; !ok && b.Modified.Before(cutoff) {
			garbage = append(garbage, b)
		}
	}
	budget := s.cfg.MaxDeletes
	take := func(l []listed) []listed {
		n := min(len(l), budget)
		budget -= n
		return l[:n]
	}
	dropped, garbage = take(dropped), take(garbage)
	deleted, bytes, err := s.deleteAll(ctx, dropped, time.Time{}, nil)
	st.ManifestsDeleted = deleted
	st.BytesDeleted += bytes
	if err == nil {
		deleted, bytes, err = s.deleteAll(ctx, garbage, cutoff, nil)
		st.BlobsDeleted = deleted
		st.BytesDeleted += bytes
	}
	st.StoredBytes = total - st.BytesDeleted
	s.stored.Store(st.StoredBytes)
	st.Duration = s.cfg.Now().Sub(start)
	return st, err
}

// readManifest reads and validates the own region's manifest at key.
func (s *Snapshotter) readManifest(ctx context.Context, key string) (Manifest, error) {
	return s.readManifestFrom(ctx, s.regions[0], key)
}

// readManifestFrom reads and validates a region's manifest at key. A store that fails is a
// *RegionUnavailableError.
func (s *Snapshotter) readManifestFrom(ctx context.Context, r region, key string) (Manifest, error) {
	rc, err := r.store.Get(ctx, key)
	if err != nil {
		return Manifest{}, fmt.Errorf("read manifest: %w", unavailable(ctx, r.name, err))
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, MaxManifestSize+1))
	if err != nil {
		return Manifest{}, fmt.Errorf("read manifest %s: %w", key, unavailable(ctx, r.name, err))
	}
	m, err := ParseManifest(data)
	if err != nil {
		return Manifest{}, fmt.Errorf("manifest %s: %w", key, err)
	}
	return m, nil
}

// deleteAll deletes the objects on up to Config.Concurrency goroutines and returns how many it deleted
// and their bytes; it stops at the first error. With a non-zero cutoff, each object is looked at again
// just before and left alone if written since cutoff: a snapshot may have renewed it since the listing.
func (s *Snapshotter) deleteAll(ctx context.Context, objs []listed, cutoff time.Time, spared func(key string)) (int, int64, error) {
	var (
		mu    sync.Mutex
		n     int
		bytes int64
	)
	err := parallel(ctx, len(objs), s.cfg.Concurrency, func(ctx context.Context, i int) error {
		if !cutoff.IsZero() {
			o, err := s.cfg.Store.Stat(ctx, objs[i].Key)
			switch {
			case errors.Is(err, blob.ErrNotFound):
				return nil
			case err != nil:
				return err
			case !o.Modified.Before(cutoff):
				if spared != nil {
					mu.Lock()
					spared(objs[i].Key)
					mu.Unlock()
				}
				return nil // renewed
			}
		}
		if err := s.cfg.Store.Delete(ctx, objs[i].Key); err != nil {
			return err
		}
		mu.Lock()
		n++
		bytes += objs[i].Size
		mu.Unlock()
		return nil
	})
	return n, bytes, err
}

// measure sets the stored bytes from a listing of the prefix.
func (s *Snapshotter) measure(ctx context.Context) error {
	var total int64
	for o, err := range s.cfg.Store.List(ctx, s.cfg.Prefix+"/") {
		if err != nil {
			return fmt.Errorf("measure stored bytes: %w", err)
		}
		total += o.Size
	}
	s.stored.Store(total)
	return nil
}

// parseManifestName reads "<epoch>-<seq>.json", the name manifestKey gives, from a listed key (untrusted):
// canonical decimals only, so each (epoch, seq) has exactly one name.
func parseManifestName(name string) (epoch, seq int64, ok bool) {
	stem, ok := strings.CutSuffix(name, ".json")
	if !ok {
		return 0, 0, false
	}
	e, q, ok := strings.Cut(stem, "-")
	if !ok {
		return 0, 0, false
	}
	epoch, ok1 := canonicalInt(e)
	seq, ok2 := canonicalInt(q)
	if !ok1 || !ok2 || seq < 1 {
		return 0, 0, false
	}
	return epoch, seq, true
}

// canonicalInt parses a non-negative decimal without sign or leading zeros.
func canonicalInt(s string) (int64, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
