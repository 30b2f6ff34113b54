package snapshot_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-mesh/warren/runner/snapshot"
)

// BenchmarkSnapshot50MB measures, against the directory blob store, a 50 MB workspace (500 files of 100
// KB of random data in 10 directories): the first snapshot (everything uploaded), a snapshot after one
// file changed (what a turn usually costs), and a restore into an empty directory (a runner starting
// elsewhere). Each iteration starts from an empty store and a new Snapshotter. Run with -benchtime=1x
// for a single measurement.
func BenchmarkSnapshot50MB(b *testing.B) {
	const size = 100_000
	ws := b.TempDir()
	writeFiles(b, ws, 500, size, 10, 42)
	buf := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{43})
	changed := filepath.Join(ws, "pkg07/file007.dat")

	var (
		first, incr, restore              time.Duration
		firstUp, incrUp, incrHashed, down int64
		n                                 int64
	)
	for b.Loop() {
		n++
		store := newStore(b)
		s := newSnapshotter(b, store, map[string]string{"workspace": ws})

		t0 := time.Now()
		_, st, err := s.Snapshot(b.Context(), 1)
		if err != nil {
			b.Fatal(err)
		}
		first += time.Since(t0)
		firstUp += st.BytesUploaded

		rng.Read(buf)
		if err := os.WriteFile(changed, buf, 0o644); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		m, st, err := s.Snapshot(b.Context(), 1)
		if err != nil {
			b.Fatal(err)
		}
		incr += time.Since(t0)
		incrUp += st.BytesUploaded
		incrHashed += int64(st.FilesHashed)
		if st.FilesUploaded != 1 {
			b.Fatalf("one changed file: %d uploaded", st.FilesUploaded)
		}

		r := newSnapshotter(b, store, map[string]string{"workspace": filepath.Join(b.TempDir(), "ws")})
		t0 = time.Now()
		rst, err := r.Restore(b.Context(), m)
		if err != nil {
			b.Fatal(err)
		}
		restore += time.Since(t0)
		down += rst.BytesDownloaded
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	b.ReportMetric(ms(first), "first_ms")
	b.ReportMetric(float64(firstUp)/float64(n), "first_bytes_uploaded")
	b.ReportMetric(ms(incr), "incr_ms")
	b.ReportMetric(float64(incrUp)/float64(n), "incr_bytes_uploaded")
	b.ReportMetric(float64(incrHashed)/float64(n), "incr_files_hashed")
	b.ReportMetric(ms(restore), "restore_ms")
	b.ReportMetric(float64(down)/float64(n), "restore_bytes_downloaded")
}

// BenchmarkCrossRegionResume100MB measures a sandbox moving between regions, each with its own versitygw
// on this machine (loopback: no distance): a 100 MB workspace (1000 files of 100 KB of random data)
// snapshotted in region a, then resumed in region b (Latest reading both regions' pointers, Restore
// downloading everything from a's store) and b's first snapshot (hashing everything and uploading it into
// b's store, which makes b independent of a). Run with -benchtime=1x for a single measurement.
func BenchmarkCrossRegionResume100MB(b *testing.B) {
	ws := b.TempDir()
	writeFiles(b, ws, 1000, 100_000, 20, 7)
	env := startRegions(b)
	total := map[string]float64{} // metric → sum over the iterations
	msSince := func(t0 time.Time) float64 { return float64(time.Since(t0).Microseconds()) / 1000 }
	n := 0
	for b.Loop() {
		n++
		// A sandbox of its own each time, so b's store holds none of it yet.
		sandbox := func(c *snapshot.Config) { c.Prefix = fmt.Sprintf("sandboxes/bench%d", n) }
		a := env.snapshotter(b, "a", map[string]string{"workspace": ws}, sandbox)
		if _, _, err := a.Snapshot(b.Context(), 1); err != nil {
			b.Fatal(err)
		}
		s := env.snapshotter(b, "b", map[string]string{"workspace": filepath.Join(b.TempDir(), "ws")}, sandbox)
		t0 := time.Now()
		m, _, err := s.Latest(b.Context())
		if err != nil || m.Region != "a" {
			b.Fatalf("latest of region %q, %v", m.Region, err)
		}
		st, err := s.Restore(b.Context(), m)
		if err != nil {
			b.Fatal(err)
		}
		total["resume_ms"] += msSince(t0)
		total["resume_bytes_downloaded"] += float64(st.BytesDownloaded)
		t0 = time.Now()
		if _, st, err = s.Snapshot(b.Context(), 2); err != nil {
			b.Fatal(err)
		}
		total["first_snapshot_in_b_ms"] += msSince(t0)
		total["first_snapshot_bytes_uploaded"] += float64(st.BytesUploaded)
	}
	for metric, sum := range total {
		b.ReportMetric(sum/float64(n), metric)
	}
}

// writeFiles fills dir with files of size random bytes, spread over dirs directories
// (pkg<NN>/file<NNN>.dat, file i in pkg i%dirs).
func writeFiles(b *testing.B, dir string, files, size, dirs int, seed byte) {
	rng := rand.NewChaCha8([32]byte{seed})
	buf := make([]byte, size)
	for i := range files {
		rng.Read(buf)
		p := filepath.Join(dir, fmt.Sprintf("pkg%02d/file%03d.dat", i%dirs, i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
