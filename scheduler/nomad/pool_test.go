package nomad_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/warren-mesh/warren/scheduler/drivertest"
	"github.com/warren-mesh/warren/scheduler/nomad"
)

func withPool(c *cluster, size int) func(*nomad.Config) {
	return func(cfg *nomad.Config) {
		cfg.Pool = nomad.PoolConfig{Size: size, Region: "r1", Registry: c.reg, Refill: 200 * time.Millisecond}
	}
}

// TestWarmPool: starts are served by pre-started runners (same contract as cold starts), and the pool
// refills behind them.
func TestWarmPool(t *testing.T) {
	c := startCluster(t)
	d := c.driver(t, withPool(c, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	warm := func() int {
		n, err := c.reg.CountWarm(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, ctx, "the pool to fill", func() bool { return warm() == 2 })

	sb, err := d.Start(ctx, drivertest.Spec("r1"))
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := c.client.Allocations().Info(sb.Alloc, nil)
	if err != nil {
		t.Fatal(err)
	}
	job, _, err := c.client.Jobs().Info(a.JobID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if job.Meta["warren_role"] != "warm" {
		t.Fatalf("sandbox came from job %s with role %q, want a warm-pool job", a.JobID, job.Meta["warren_role"])
	}
	resp, err := http.Get("http://" + sb.Addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitFor(t, ctx, "the pool to refill", func() bool { return warm() == 2 })
	if err := d.Stop(ctx, sb.Alloc); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Exited:
	case <-ctx.Done():
		t.Fatal("a claimed warm sandbox's Exited did not close after Stop")
	}
	// The contract holds for pooled starts too (the pool serves the first starts, then cold ones
	// take over while it refills).
	drivertest.Run(t, d)
}

func BenchmarkWarmClaim(b *testing.B) {
	c := startCluster(b)
	d := c.driver(b, withPool(c, 1))
	ctx := context.Background()
	var took []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		deadline := time.Now().Add(60 * time.Second)
		for {
			n, err := c.reg.CountWarm(ctx, "r1")
			if err != nil {
				b.Fatal(err)
			}
			if n >= 1 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("the pool did not refill")
			}
			time.Sleep(50 * time.Millisecond)
		}
		b.StartTimer()
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		begin := time.Now()
		sb, err := d.Start(sctx, drivertest.Spec("r1"))
		took = append(took, time.Since(begin))
		if err != nil {
			cancel()
			b.Fatal(err)
		}
		b.StopTimer()
		if err := d.Stop(sctx, sb.Alloc); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.StartTimer()
	}
	slices.Sort(took)
	pct := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	b.ReportMetric(pct(0.50).Seconds(), "p50-s")
	b.ReportMetric(pct(0.95).Seconds(), "p95-s")
}
