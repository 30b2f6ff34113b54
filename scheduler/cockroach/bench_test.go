package cockroach_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/cockroach"
)

// BenchmarkClaimRace3Regions: three regions' schedulers (three stores, a pool each, on one PostgreSQL at
// SERIALIZABLE) race to claim each user: for a new user (expect 0) and for a sleeping one taken over (expect
// its epoch), one claim from each region at once. Exactly one claim per user wins, or the benchmark fails.
// Reports users decided per second (three racing claims each, one user after the other) and p50/p99 of one
// claim.
//
//	go test ./scheduler/cockroach -run XXX -bench ClaimRace3Regions -benchtime 300x
func BenchmarkClaimRace3Regions(b *testing.B) {
	dsn := testenv.PostgreSQL(b)
	regions := []string{"eu", "us", "ap"}
	stores := make([]*cockroach.Placements, len(regions))
	for i := range stores {
		stores[i] = open(b, dsn, cockroach.Config{})
	}
	ctx := context.Background()
	lease := func() time.Time { return time.Now().Add(time.Minute) }
	for _, c := range []struct {
		name  string
		setup func(user string) int64 // the epoch the claims expect
	}{
		{"new", func(string) int64 { return 0 }},
		{"takeover", func(user string) int64 {
			p, err := stores[0].Claim(ctx, "acme", user, "eu", 0, lease())
			if err == nil {
				err = stores[0].Update(ctx, "acme", user, p.Epoch, scheduler.StateAsleep, "")
			}
			if err != nil {
				b.Fatal(err)
			}
			return p.Epoch
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			run := fmt.Sprintf("%s-%d", c.name, time.Now().UnixNano())
			var (
				mu      sync.Mutex
				lat     []time.Duration
				elapsed time.Duration
				failed  atomic.Value
			)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				user := fmt.Sprintf("%s-%d", run, i)
				b.StopTimer()
				expect := c.setup(user)
				b.StartTimer()
				start := time.Now()
				var wins atomic.Int32
				var wg sync.WaitGroup
				for r, s := range stores {
					wg.Go(func() {
						t0 := time.Now()
						_, err := s.Claim(ctx, "acme", user, regions[r], expect, lease())
						d := time.Since(t0)
						switch {
						case err == nil:
							wins.Add(1)
						case errors.Is(err, scheduler.ErrConflict), errors.As(err, new(*scheduler.OwnedError)):
						default:
							failed.Store(err)
						}
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					})
				}
				wg.Wait()
				elapsed += time.Since(start)
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				if n := wins.Load(); n != 1 {
					b.Fatalf("user %s: %d claims won, want exactly 1", user, n)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "users/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
