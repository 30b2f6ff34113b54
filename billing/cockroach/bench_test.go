package cockroach_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/internal/testenv"
)

// BenchmarkReserveSettle is the ledger's share of one model call: a Reserve and its Settle, from parallel
// callers (4 per CPU). On one account every transaction contends for the same rows (the worst case, as
// billing/sqlite's benchmark measures it); on many accounts, one per caller, they do not (the usual case:
// a user has few concurrent calls). reservations/s counts Reserve+Settle pairs.
func BenchmarkReserveSettle(b *testing.B) {
	for _, bc := range []struct {
		name     string
		accounts bool
	}{{"one-account", false}, {"many-accounts", true}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			l := open(b, testenv.PostgreSQL(b), cockroach.Config{})
			var seq, callers atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				acct := ledgertest.Day
				if bc.accounts {
					acct.User = "u" + strconv.FormatInt(callers.Add(1), 10)
				}
				for pb.Next() {
					id := strconv.FormatInt(seq.Add(1), 10)
					g, err := l.Reserve(ctx, id, acct, 1<<62, 1000, time.Minute)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Settle(ctx, id, ledgertest.AI(id, acct, g/2)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reservations/s")
			if !bc.accounts {
				ledgertest.AssertUsage(b, l, ledgertest.Day, billing.Usage{AIMicros: 500 * int64(b.N)})
			}
		})
	}
}

// BenchmarkRateBucketsTakeAll is what a connect or prompt costs at the edge for its rate limits: one
// TakeAll from parallel callers (4 per CPU), each a user of its own under one issuer. "user+issuer" takes
// from the user's and the issuer's buckets (the issuer's is the contended row, as in production);
// "user" has the issuer unlimited (nothing of it is read). Rates are high enough that nothing is refused.
//
//	go test -run '^$' -bench RateBuckets -benchtime 5s ./billing/cockroach
func BenchmarkRateBucketsTakeAll(b *testing.B) {
	for _, bc := range []struct {
		name   string
		issuer int64
	}{{"user+issuer", 1 << 30}, {"user", billing.Unlimited}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			r := open(b, testenv.PostgreSQL(b), cockroach.Config{}).RateBuckets()
			var callers atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				user := "rate/user/iss\x00u" + strconv.FormatInt(callers.Add(1), 10)
				takes := []billing.RateTake{
					{Key: user, PerMinute: 1 << 30, Burst: 1 << 30},
					{Key: "rate/issuer/iss", PerMinute: bc.issuer, Burst: 1 << 30},
				}
				for pb.Next() {
					if ok, _, err := r.TakeAll(ctx, takes); err != nil || !ok {
						b.Errorf("TakeAll = %v, %v", ok, err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "takes/s")
		})
	}
}
