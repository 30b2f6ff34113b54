package snapshot_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSnapshot50MB measures, against the directory blob store, a 50 MB workspace (500 files of 100
// KB of random data in 10 directories): the first snapshot (everything uploaded), a snapshot after one
// file changed (what a turn usually costs), and a restore into an empty directory (a runner starting
// elsewhere). Each iteration starts from an empty store and a new Snapshotter. Run with -benchtime=1x
// for a single measurement.
func BenchmarkSnapshot50MB(b *testing.B) {
	const files, size = 500, 100_000
	ws := b.TempDir()
	rng := rand.NewChaCha8([32]byte{42})
	buf := make([]byte, size)
	for i := range files {
		rng.Read(buf)
		p := filepath.Join(ws, fmt.Sprintf("pkg%02d/file%03d.dat", i%10, i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
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
