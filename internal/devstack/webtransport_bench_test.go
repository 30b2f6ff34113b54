package devstack_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/testenv"
	warren "github.com/warren-mesh/warren/sdk"
)

// benchStack is the dev platform with the real Claude Code CLI against a scripted model whose "long"
// scenario streams its 200 text deltas without pause, and no rate limits.
func benchStack(b *testing.B) *devstack.Stack {
	b.Helper()
	model := modelserver.New(modelserver.Options{DefaultScenario: "long", Delay: time.Microsecond})
	upstream, err := model.Start("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = model.Close() })
	st, err := devstack.Start(context.Background(), devstack.Config{
		DataDir: b.TempDir(), Listen: "127.0.0.1:0", Binary: binary,
		ClaudeCLI: testenv.ClaudeCLI(b), ModelAPIKey: "scripted-bench-key", ModelUpstream: upstream,
		DefaultModel: "claude-sonnet-4-5",
		Rates:        edge.Rates{ConnectsPerUser: -1, ConnectsPerIssuer: -1, PromptsPerUser: -1, PromptsPerIssuer: -1},
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

// benchPrompt is the prompt of the events benchmarks' turns (from Go and from the browser): the scripted model
// answers it with the "long" scenario.
const benchPrompt = "tell me a long story"

// reportQuantiles reports the p50 and p99 of ds in microseconds.
func reportQuantiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	q := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// BenchmarkAgentChannel compares the transports through a real edge and runner (the Claude Code CLI against
// the scripted model), from Go:
//
//   - ping: JSON ping → pong round trips on one session (p50, p99);
//   - connect: dial, init, up to the first event (ready), then close: a new session per iteration (p50, p99);
//   - events: one turn of the "long" scenario (about 200 stream events) per iteration: events per second.
//
// go test -run '^$' -bench BenchmarkAgentChannel -benchtime 200x ./internal/devstack/
func BenchmarkAgentChannel(b *testing.B) {
	st := benchStack(b)
	for _, tr := range []warren.Transport{warren.TransportWebSocket, warren.TransportWebTransport} {
		tok := mint(b, st, "bench-"+string(tr))
		c, err := warren.New(st.URL(), tok, warren.WithTransport(tr, 0))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.Run(string(tr)+"/ping", func(b *testing.B) {
			s, err := c.Dial(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if s.Transport() != tr {
				b.Fatalf("over %s", s.Transport())
			}
			rtts := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				d, err := s.Ping(ctx)
				if err != nil {
					b.Fatal(err)
				}
				rtts = append(rtts, d)
			}
			reportQuantiles(b, rtts)
		})
		b.Run(string(tr)+"/connect", func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				start := time.Now()
				s, err := c.Dial(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Next(ctx); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
				_ = s.Close()
			}
			reportQuantiles(b, ds)
		})
		b.Run(string(tr)+"/events", func(b *testing.B) {
			s, err := c.Dial(ctx, &warren.SessionOptions{IncludePartialMessages: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			n, busy := 0, time.Duration(0)
			for b.Loop() {
				start := time.Now()
				for _, err := range s.Prompt(ctx, benchPrompt) {
					if err != nil {
						b.Fatal(err)
					}
					n++
				}
				busy += time.Since(start)
			}
			b.ReportMetric(float64(n)/busy.Seconds(), "events/s")
		})
	}
}
