package isolate

import (
	"context"
	"crypto/rand"
	"sort"
	"testing"
	"time"
)

// BenchmarkExecBesideCPUHog measures one tenant's exec (`true` in its sandbox) while it is idle, and
// while another tenant on the host runs 30 busy loops under the default CPU limit (one core): the
// neighbour's p50 should stay within 2x of idle. Run as root:
//
//	go test ./runner/isolate/ -run '^$' -bench ExecBesideCPUHog -benchtime 100x
func BenchmarkExecBesideCPUHog(b *testing.B) {
	if testing.Short() {
		b.Skip("needs bubblewrap and root")
	}
	limited := func(cpu int64) *Sandbox {
		cfg := secureConfig(b, b.TempDir(), nil)
		lim := Limits{Processes: 1024, MemoryBytes: 1 << 30, CPUMillis: cpu}
		cg, err := NewCgroup("/warren-test", "bench-"+rand.Text()[:8], lim)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cg.Close() })
		cfg.Cgroup, cfg.Limits = cg, lim
		s, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	victim, hog := limited(1000), limited(1000)
	measure := func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			res, err := victim.Run(context.Background(), Spec{Command: "true", Timeout: time.Minute})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("%v %+v", err, res)
			}
			lat = append(lat, time.Since(start))
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	b.Run("idle", measure)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = hog.Run(ctx, Spec{Command: `for i in $(seq 30); do sh -c 'while :; do :; done' & done; wait`, Timeout: time.Hour})
	}()
	time.Sleep(time.Second)
	b.Run("beside-30-cpu-hogs", measure)
	cancel()
	<-done
}
