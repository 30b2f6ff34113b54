//go:build unix

package snapshot_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	blobs3 "github.com/warren-mesh/warren/internal/blob/s3"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/runner/snapshot"
)

// rawGetClients is how many parallel clients the raw GET floor uses.
const rawGetClients = 16

// BenchmarkResume1GiB measures, against a real versitygw on loopback (keeping connections alive, as S3
// does), a runner resuming a 1 GiB workspace of a realistic shape (writeWorkspace1GiB: 10,000 small
// files, 64 of a few MiB, 4 large ones) into an empty directory, then the snapshot of the first turn after
// the resume and of three more turns, each changing one small file. Beside each figure, its floor measured
// in the same run: for the resume, `cp -r` of the same tree and the raw GET throughput of the same server
// (every blob fetched by rawGetClients parallel clients of the plain SDK, 8 MiB ranges for large ones,
// bytes discarded); for a turn's snapshot, a stat walk of the tree plus the hash of the changed file.
// Each is reported as wall time (_ms) and as CPU time of this process and the children it waited for
// (_cpu_ms: the server's is not counted), and as ratios to its floors: on a shared machine the CPU
// ratios say more than the wall times. Setting up (writing the tree, the first upload) is not measured.
// `make bench` runs it once; -benchtime=3x for more.
func BenchmarkResume1GiB(b *testing.B) {
	srv := testenv.StartS3With(b, testenv.S3Options{KeepAlive: true}) // skips under -short
	ws := filepath.Join(b.TempDir(), "ws")
	files, size := writeWorkspace1GiB(b, ws)
	bucket := srv.CreateBucket(b)
	store, err := blobs3.New(b.Context(), blobs3.Config{
		Endpoint: srv.Endpoint(), Region: srv.Region(), Bucket: bucket, PathStyle: true,
		AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(),
	})
	must(b, err)
	m, _, err := newSnapshotter(b, store, map[string]string{"workspace": ws}).Snapshot(b.Context(), 1)
	must(b, err)
	raw := newRawGetter(srv, bucket, m)
	b.Logf("workspace: %d files, %d MiB", files, size>>20)

	total := map[string]float64{} // metric → sum over the iterations
	// timed runs fn and adds its wall and CPU time (of this process, plus that of the children it
	// waited for) in milliseconds to metric_ms and metric_cpu_ms.
	timed := func(metric string, fn func()) float64 {
		cpu0, t0 := cpuTime(), time.Now()
		fn()
		ms := float64(time.Since(t0).Microseconds()) / 1000
		total[metric+"_ms"] += ms
		total[metric+"_cpu_ms"] += float64((cpuTime() - cpu0).Microseconds()) / 1000
		return ms
	}
	const turns = 3 // after the first one after the resume
	var turnMs []float64
	n := 0
	for b.Loop() {
		n++
		scratch := b.TempDir()
		timed("floor_cp", func() {
			if out, err := exec.Command("cp", "-r", ws, filepath.Join(scratch, "cp")).CombinedOutput(); err != nil {
				b.Fatalf("cp -r: %v: %s", err, out)
			}
		})
		timed("floor_raw_get", func() { raw.getAll(b) })

		dst := filepath.Join(scratch, "ws")
		s := newSnapshotter(b, store, map[string]string{"workspace": dst})
		timed("resume", func() {
			st, err := s.Restore(b.Context(), m)
			must(b, err)
			total["resume_bytes_downloaded"] += float64(st.BytesDownloaded)
		})

		// The first turn after the resume, then more turns, each changing one small file.
		for turn := range turns + 1 {
			changed := filepath.Join(dst, fmt.Sprintf("src/mod%03d/sub0/file%05d.txt", turn, turn))
			must(b, os.WriteFile(changed, fmt.Appendf(nil, "turn %d of run %d\n", turn, n), 0o644))
			metric := "turn"
			if turn == 0 {
				metric = "turn1"
			}
			var st snapshot.Stats
			ms := timed(metric+"_snapshot", func() {
				var err error
				_, st, err = s.Snapshot(b.Context(), 1)
				must(b, err)
			})
			total[metric+"_files_hashed"] += float64(st.FilesHashed)
			if turn > 0 {
				turnMs = append(turnMs, ms)
				timed("floor_turn", func() { statWalkAndHash(b, dst, changed) })
			}
		}
		must(b, os.RemoveAll(scratch)) // 2 GiB a run
	}
	for metric, sum := range total {
		if strings.HasPrefix(metric, "turn_") || strings.HasPrefix(metric, "floor_turn") {
			sum /= turns
		}
		b.ReportMetric(sum/float64(n), metric)
	}
	slices.Sort(turnMs)
	b.ReportMetric(turnMs[len(turnMs)/2], "turn_snapshot_median_ms")
	b.ReportMetric(float64(size)/(1<<20)/(total["resume_ms"]/float64(n)/1000), "resume_MiB/s")
	for _, r := range [][2]string{{"resume", "floor_cp"}, {"resume", "floor_raw_get"}, {"turn_snapshot", "floor_turn"}} {
		b.ReportMetric(total[r[0]+"_ms"]/total[r[1]+"_ms"], r[0]+"/"+r[1])
		b.ReportMetric(total[r[0]+"_cpu_ms"]/total[r[1]+"_cpu_ms"], r[0]+"/"+r[1]+"_cpu")
	}
}

// cpuTime is the CPU time, user and system, of this process and of the children it waited for.
func cpuTime() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	var d time.Duration
	for _, tv := range []syscall.Timeval{self.Utime, self.Stime, children.Utime, children.Stime} {
		d += time.Duration(tv.Nano())
	}
	return d
}

// writeWorkspace1GiB fills dir with 1 GiB of random (incompressible, never duplicated) files shaped like
// a developer's workspace: 10,000 small files of 100 B to 64 KiB (log-uniform: sources, a dependency
// tree) in 500 directories two levels deep, 64 files of 1 to 8 MiB (binaries, assets), and 4 large files
// making up the rest (about 160 MiB each: a database, a data set). It returns the file count and bytes.
func writeWorkspace1GiB(b *testing.B, dir string) (int, int64) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := rand.NewChaCha8([32]byte{24})
	buf := make([]byte, 8<<20)
	var total int64
	put := func(p string, n int64) {
		p = filepath.Join(dir, p)
		must(b, os.MkdirAll(filepath.Dir(p), 0o755))
		f, err := os.Create(p)
		must(b, err)
		for left := n; left > 0; {
			k := min(left, int64(len(buf)))
			src.Read(buf[:k])
			_, err := f.Write(buf[:k])
			must(b, err)
			left -= k
		}
		must(b, f.Close())
		total += n
	}
	for i := range 10_000 {
		put(fmt.Sprintf("src/mod%03d/sub%d/file%05d.txt", i%250, i/250%2, i), int64(100*math.Pow(655.36, rng.Float64())))
	}
	for i := range 64 {
		put(fmt.Sprintf("assets/blob%02d.bin", i), 1<<20+rng.Int64N(7<<20))
	}
	large := (1<<30 - total) / 4
	for i := range 4 {
		put(fmt.Sprintf("data/large%d.db", i), large)
	}
	return 10_000 + 64 + 4, total
}

// rawGetter fetches every blob of a manifest with the plain SDK, the floor of a resume.
type rawGetter struct {
	client *s3.Client
	bucket string
	jobs   []rawGet
}

type rawGet struct {
	key   string
	rng   string // HTTP Range, or "" for the whole object
	bytes int64
}

// rawRange is the size of the ranges large objects are fetched in.
const rawRange = 8 << 20

func newRawGetter(srv *testenv.S3Server, bucket string, m snapshot.Manifest) *rawGetter {
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) { tr.MaxIdleConnsPerHost = rawGetClients })
	r := &rawGetter{bucket: bucket, client: s3.New(s3.Options{
		Region: srv.Region(), BaseEndpoint: aws.String(srv.Endpoint()), UsePathStyle: true, HTTPClient: hc,
		Credentials:                credentials.NewStaticCredentialsProvider(srv.AccessKey(), srv.SecretKey(), ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})}
	for _, d := range m.Dirs {
		for _, e := range d.Entries {
			if e.Type != snapshot.TypeFile || e.Size == 0 {
				continue
			}
			key := prefix + "/blobs/" + e.SHA256
			if e.Size <= rawRange {
				r.jobs = append(r.jobs, rawGet{key: key, bytes: e.Size})
				continue
			}
			for off := int64(0); off < e.Size; off += rawRange {
				end := min(off+rawRange, e.Size) - 1
				r.jobs = append(r.jobs, rawGet{key: key, rng: fmt.Sprintf("bytes=%d-%d", off, end), bytes: end - off + 1})
			}
		}
	}
	// Largest first, as a good scheduler would.
	slices.SortFunc(r.jobs, func(a, b rawGet) int { return int(b.bytes - a.bytes) })
	return r
}

func (r *rawGetter) getAll(b *testing.B) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range rawGetClients {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(r.jobs); i = int(next.Add(1) - 1) {
				j := r.jobs[i]
				in := &s3.GetObjectInput{Bucket: &r.bucket, Key: &j.key}
				if j.rng != "" {
					in.Range = &j.rng
				}
				out, err := r.client.GetObject(context.Background(), in)
				if err == nil {
					var n int64
					n, err = io.Copy(io.Discard, out.Body)
					out.Body.Close()
					if err == nil && n != j.bytes {
						err = fmt.Errorf("%s %s: %d bytes, want %d", j.key, j.rng, n, j.bytes)
					}
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// statWalkAndHash is the least a snapshot of one changed file must do: stat every entry, hash that file.
func statWalkAndHash(b testing.TB, dir, changed string) {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			_, err = d.Info()
		}
		return err
	})
	must(b, err)
	f, err := os.Open(changed)
	must(b, err)
	defer f.Close()
	_, err = io.Copy(sha256.New(), f)
	must(b, err)
}
