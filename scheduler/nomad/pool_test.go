package nomad_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

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

	// Regions have pools of their own: the subtests below use r2 and full, which r1's pool ignores.
	t.Run("DeadRunnerFallsBackCold", func(t *testing.T) { testDeadWarmRunner(t, c) })
	t.Run("ForgedAnnouncementTouchesNothing", func(t *testing.T) { testForgedAnnouncement(t, c) })
	t.Run("FullClusterBounded", func(t *testing.T) { testFullCluster(t, c) })

	// The contract holds for pooled starts too (the pool serves the first starts, then cold ones
	// take over while it refills).
	drivertest.Run(t, d)
}

// syncBuffer is a log sink tests read while the driver writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// r2Driver is a driver with a pool of one in region r2 that refills only after its own claims.
func r2Driver(t *testing.T, c *cluster) (*nomad.Driver, *syncBuffer) {
	logs := &syncBuffer{}
	d := c.driver(t, func(cfg *nomad.Config) {
		cfg.Pool = nomad.PoolConfig{Size: 1, Region: "r2", Registry: c.reg, Refill: time.Hour}
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	return d, logs
}

// announcement reads the one warm announcement of region, waiting for it.
func announcement(t *testing.T, ctx context.Context, c *cluster, region string) *consulapi.KVPair {
	t.Helper()
	var pair *consulapi.KVPair
	waitFor(t, ctx, "a warm runner of "+region, func() bool {
		pairs, _, err := consulKV(t, c).List("warren/warm/"+region+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pairs {
			if p.Session != "" {
				pair = p
				return true
			}
		}
		return false
	})
	return pair
}

func consulKV(t *testing.T, c *cluster) *consulapi.KV {
	cc, err := consulapi.NewClient(&consulapi.Config{Address: c.consul.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	return cc.KV()
}

// plant writes an announcement held by a session of the test's own (so that it looks alive), replacing
// whatever key was there.
func plant(t *testing.T, c *cluster, key string, value []byte) {
	t.Helper()
	cc, err := consulapi.NewClient(&consulapi.Config{Address: c.consul.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.KV().Delete(key, nil); err != nil {
		t.Fatal(err)
	}
	session, _, err := cc.Session().Create(&consulapi.SessionEntry{TTL: "120s", Behavior: consulapi.SessionBehaviorDelete}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Session().Destroy(session, nil) })
	if ok, _, err := cc.KV().Acquire(&consulapi.KVPair{Key: key, Value: value, Session: session}, nil); err != nil || !ok {
		t.Fatalf("plant %s: %v, %v", key, ok, err)
	}
}

// A warm runner that died while its announcement lives on does not fail the start that claims it: the
// driver finds nothing listening, abandons that job and starts cold.
func testDeadWarmRunner(t *testing.T, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, logs := r2Driver(t, c)
	pair := announcement(t, ctx, c, "r2")
	alloc := strings.TrimPrefix(pair.Key, "warren/warm/r2/")
	a, _, err := c.client.Allocations().Info(alloc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.client.Allocations().Signal(a, nil, "runner", "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the killed warm runner's allocation to end", func() bool {
		a, _, err := c.client.Allocations().Info(alloc, nil)
		return err == nil && a.ClientTerminalStatus()
	})
	plant(t, c, pair.Key, pair.Value) // its session may expire any time: keep the announcement alive

	sb, err := d.Start(ctx, drivertest.Spec("r2"))
	if err != nil {
		t.Fatalf("start with a dead warm runner announced: %v", err)
	}
	defer d.Stop(context.Background(), sb.Alloc)
	if sb.Alloc == alloc {
		t.Fatal("the sandbox is the dead warm runner")
	}
	if !strings.Contains(logs.String(), "skipped a claimed warm runner") || !strings.Contains(logs.String(), alloc) {
		t.Fatalf("the dead runner %s was not claimed and skipped; driver log:\n%s", alloc, logs.String())
	}
	waitFor(t, ctx, "the dead warm runner's job to be purged", func() bool {
		_, _, err := c.client.Jobs().Info(a.JobID, nil)
		return err != nil && strings.Contains(err.Error(), "404")
	})
}

// An announcement naming a running sandbox (no warm runner) is skipped without touching that sandbox. The
// deceived driver's own warm and cold jobs cannot be placed (so the forged announcement is the only one
// it can claim): its start ends in ErrNoCapacity, not in the victim's deregistration.
func testForgedAnnouncement(t *testing.T, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	plain := c.driver(t, nil)
	victim, err := plain.Start(ctx, drivertest.Spec("r3"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop(context.Background(), victim.Alloc)
	va, _, err := c.client.Allocations().Info(victim.Alloc, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	deceived := c.driver(t, func(cfg *nomad.Config) {
		cfg.MemoryMB = 1 << 20
		cfg.Pool = nomad.PoolConfig{Size: 1, Region: "r3", Registry: c.reg, Refill: time.Hour}
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	plant(t, c, "warren/warm/r3/"+victim.Alloc, []byte(`{"region":"r3","alloc":"`+victim.Alloc+`","addr":"`+victim.Addr+`","key":"forged"}`))
	if _, err := deceived.Start(ctx, drivertest.Spec("r3")); !errors.Is(err, nomad.ErrNoCapacity) {
		t.Fatalf("start with only a forged announcement = %v, want a cold start failing with ErrNoCapacity", err)
	}
	if !strings.Contains(logs.String(), "skipped a claimed warm runner") || !strings.Contains(logs.String(), "not a warm runner") {
		t.Fatalf("the forged announcement was not skipped; driver log:\n%s", logs.String())
	}
	job, _, err := c.client.Jobs().Info(va.JobID, nil)
	if err != nil || (job.Stop != nil && *job.Stop) {
		t.Fatalf("the victim's job after a forged claim: %v", err)
	}
	resp, err := http.Get("http://" + victim.Addr + "/healthz")
	if err != nil {
		t.Fatalf("the victim's runner after a forged claim: %v", err)
	}
	resp.Body.Close()
	deceived.Close()
	purgeRegion(t, c, "r3")
}

// warmJobs counts region's warm-pool jobs in Nomad, by status.
func warmJobs(t *testing.T, c *cluster, region string) map[string]int {
	t.Helper()
	stubs, _, err := c.client.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, &api.QueryOptions{Prefix: "sandbox-"})
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, j := range stubs {
		if j.Meta["warren_role"] == "warm" && j.Meta["warren_region"] == region {
			n[j.Status]++
		}
	}
	return n
}

// When Nomad cannot place warm jobs, the pool registers Size of them and waits, however many refill and
// pending periods pass.
func testFullCluster(t *testing.T, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := c.driver(t, func(cfg *nomad.Config) {
		cfg.MemoryMB = 1 << 20 // 1 TiB: no dev node has it
		cfg.Pool = nomad.PoolConfig{Size: 2, Region: "full", Registry: c.reg, Refill: 50 * time.Millisecond, Pending: 200 * time.Millisecond}
	})
	waitFor(t, ctx, "two unplaceable warm jobs", func() bool { return warmJobs(t, c, "full")["pending"] == 2 })
	// 20 pending periods, 80 refill periods: enough for an unbounded pool to register dozens.
	end := time.Now().Add(4 * time.Second)
	for time.Now().Before(end) {
		if n := warmJobs(t, c, "full"); n["pending"]+n["running"]+n["dead"] > 2 {
			t.Fatalf("warm jobs of an unplaceable pool of 2: %v", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.Close()
	purgeRegion(t, c, "full")
}

// purgeRegion purges region's warm jobs (unplaceable ones would otherwise stay blocked in Nomad).
func purgeRegion(t *testing.T, c *cluster, region string) {
	t.Helper()
	stubs, _, err := c.client.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, &api.QueryOptions{Prefix: "sandbox-"})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range stubs {
		if j.Meta["warren_role"] == "warm" && j.Meta["warren_region"] == region {
			if _, _, err := c.client.Jobs().Deregister(j.ID, true, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
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
